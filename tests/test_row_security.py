"""A row-level security policy never makes a copy or a compare see a subset of a table.

Every session runs with ``row_security = off``: a statement whose rows a policy would
filter fails, and pgferry says so in one line naming the table and the fix.  Here the leaf
reaches its provider as a role that is neither the table's owner nor BYPASSRLS (through
``remote_extra_connstr``), and the provider's table has a policy that shows it half the
rows.
"""

from __future__ import annotations

import itertools

import psycopg
import pytest

from pgferry.cli.main import main
from pgferry.testing.cascade import Cascade
from pgferry.testing.scenario import wait_until
from tests.fixtures.fix_cascade import Pair

READER = "ferry_rls_reader"
_queues = itertools.count(1)
FIX = "run it as the table's owner or as a role with BYPASSRLS"


def make_reader(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"do $$ begin if not exists (select from pg_roles where rolname = '{READER}')"
            f" then create role {READER} login; end if; end $$"
        )


def grant_reader(dsn: str) -> None:
    """The reader may do what a leaf's worker does on its provider (granted on the
    node's schemas once the root is made, as its admin could) and read public.t."""
    schemas = "ferry_queue, ferry_node, ferry"
    statements = [
        f"grant usage on schema {schemas}, public to {READER}",
        f"grant all on all tables in schema {schemas} to {READER}",
        f"grant all on all sequences in schema {schemas} to {READER}",
        f"grant execute on all routines in schema {schemas} to {READER}",
        f"grant select on public.t to {READER}",
    ]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.fixture
def policed(db_a, db_b, tmp_path):
    make_reader(db_a)
    cascade = Cascade(f"rls{next(_queues)}", tmp_path)
    root_cfg = cascade.node("rootnode", db_a, "root", job_name="rlsroot")
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute("create table public.t (id int primary key, v text)")
    grant_reader(db_a)
    leaf_cfg = cascade.node(
        "leafnode", db_b, "leaf", "rootnode", job_name="rlsleaf",
        remote_extra_connstr=f"user={READER}",
    )  # fmt: skip
    pair = Pair(cascade, root_cfg, leaf_cfg)
    pair.leaf("create table public.t (id int primary key, v text)")
    pair.root("insert into public.t select g, 'v' || g from generate_series(1, 10) g")
    pair.root("alter table public.t enable row level security")
    pair.root("create policy evens on public.t using (id % 2 = 0)")
    pair.add_tables("public.t")
    # What the reader would see with row security on: half the table.
    with psycopg.connect(pair.root_dsn, user=READER) as conn:
        assert conn.execute("select count(*) from public.t").fetchone() == (5,)
    yield pair
    for worker in pair.workers:
        worker.conns.close()


def copy_state(pair) -> tuple:
    return pair.leaf(
        "select merge_state, copy_error from ferry.table_info where table_name = 'public.t'"
    )[0]


def test_copy_refuses_a_table_a_policy_would_filter(policed) -> None:
    pair = policed
    worker = pair.worker()
    pair.tick()

    def failed() -> bool:
        worker.work()
        return bool(copy_state(pair)[1])

    wait_until(failed, 60, "the copy to fail")
    state, error = copy_state(pair)
    assert state != "ok"
    assert '"t"' in error and FIX in error and "\n" not in error
    assert pair.leaf("select count(*) from public.t") == [(0,)]


def test_compare_refuses_a_table_a_policy_would_filter(policed, capsys) -> None:
    pair = policed
    pair.root("alter table public.t disable row level security")
    pair.catch_up(pair.worker())
    pair.root("alter table public.t enable row level security")
    ini = str(pair.leaf_cfg.path)
    with pair.running():
        capsys.readouterr()
        assert main([ini, "compare"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith("pgferry: ") and FIX in err[-1] and '"t"' in err[-1], err
