"""capture-ddl gives nobody more than they had: a query string that smuggles statements past
the root's splitter is refused there, a captured-DDL event that is not one statement of the
captured kinds on its table is refused on the leaf (replay goes on, status shows it), and
what a leaf runs, it runs as its table's owner."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo

from pgferry.errors import PgferryError
from pgferry.metrics.worker import read_node
from pgferry.scripts import ddl_check
from pgferry.testing.cascade import Cascade

_roles = itertools.count()


def _make_role(dsn: str, role: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"create role {role} login")


@pytest.fixture
def roles(new_db_a, new_db_b) -> Iterator[tuple[str, str, str, str]]:
    """(root dsn, leaf dsn, app, owner): the role ``app`` on both clusters, owner of the
    root's ``app.t``; the role ``owner`` on the leaf's cluster, owner of its ``app.t``.
    Cluster-wide, so named per test; their superuser bit is taken back afterwards."""
    root, leaf = new_db_a(), new_db_b()
    n = f"{os.getpid()}_{next(_roles)}"
    app, owner = f"app_{n}", f"owner_{n}"
    _make_role(root, app)
    _make_role(leaf, app)
    _make_role(leaf, owner)
    yield root, leaf, app, owner
    for dsn in (root, leaf):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"alter role {app} nosuperuser")


@pytest.fixture
def owned(make_cascade, roles) -> tuple[Cascade, str, str]:
    """root (A) -> leaf (B) replicating app.t, capture-ddl on; the cascade, app, owner."""
    root, leaf, app, owner = roles
    c = make_cascade()
    c.node("root", root, "root")
    c.node("leaf", leaf, "leaf", "root")
    c.sql(
        "root",
        f"create schema app authorization {app};"
        f" create table app.t (id int primary key, v text); alter table app.t owner to {app};"
        " insert into app.t select g, 'v' || g from generate_series(1, 5) g",
    )
    c.sql(
        "leaf",
        f"create schema app; grant usage, create on schema app to {app}, {owner};"
        f" create table app.t (id int primary key, v text); alter table app.t owner to {owner};"
        " create table app.other (id int primary key)",
    )
    c.add("root", "app.t")
    c.add("leaf", "app.t")
    c.catch_up("leaf")
    assert c.cli("root", "capture-ddl", "on").code == 0
    return c, app, owner


def _as(c: Cascade, node: str, role: str) -> str:
    return conninfo.make_conninfo(c.dsns[node], user=role)


def _superuser(c: Cascade, node: str, role: str) -> bool:
    return c.sql(node, "select rolsuper from pg_roles where rolname = %s", (role,))[0][0]


def _columns(c: Cascade, node: str, table: str) -> list[str]:
    return [
        r[0]
        for r in c.sql(
            node,
            "select attname::text from pg_attribute where attrelid = %s::regclass"
            " and attnum > 0 and not attisdropped order by attnum",
            (table,),
        )
    ]


def test_smuggled_statements_are_refused_on_the_root(owned) -> None:
    c, app, _ = owned
    attack = (
        "alter table app.t add column €$q$x int;"
        " create function app.f() returns void language plpgsql as"
        f" 'begin execute ''alter role {app} superuser''; exception when others then null; end';"
        ' select app.f(); select 1 as "$q$"'
    )
    do_block = (
        "alter table app.t add column €$q$y int;"
        f" do 'begin execute ''alter role {app} superuser''; exception when others then null; end';"
        ' select 1 as "$q$"'
    )
    refusals = []
    for query in (attack, do_block):
        try:
            with psycopg.connect(_as(c, "root", app), autocommit=True) as conn:
                conn.execute(query)
        except psycopg.Error as exc:
            refusals.append(exc.diag.message_primary or "")
        # What reaches the leaf first: the role must not be a superuser there.
        c.catch_up("leaf", timeout=30)
        assert not _superuser(c, "leaf", app)
        assert c.sql("leaf", "select to_regproc('app.f') is null") == [(True,)]
    assert len(refusals) == 2, "the root refuses both query strings"
    for line in refusals:
        assert line.startswith(
            "pgferry: capture-ddl cannot be sure how the server split this query string"
            " (a $ inside a name not quoted); run the DDL as a statement of its own"
        ), line
    c.sql("root", "insert into app.t values (6, 'after')")
    c.catch_up("leaf")
    assert not _superuser(c, "leaf", app)
    assert c.sql("leaf", "select to_regproc('app.f') is null") == [(True,)]
    assert c.sql("root", "select to_regproc('app.f') is null") == [(True,)]
    assert _columns(c, "root", "app.t") == ["id", "v"]
    assert _columns(c, "leaf", "app.t") == ["id", "v"]
    q = "select id, v from app.t order by id"
    assert c.sql("leaf", q) == c.sql("root", q)


def _forge(c: Cascade, text: str, attrs: str = "") -> int:
    """An EXECUTE event made as capture-ddl makes one, inserted as the queue's owner."""
    name = "ddl " + hashlib.md5(text.encode()).hexdigest()[:12] + ": " + text[:40]
    digest = hashlib.sha256(text.encode()).hexdigest()
    rows = c.sql(
        "root",
        "select ferry_queue.insert_event(%s, 'EXECUTE', %s, %s, %s, %s, %s)",
        (c.queue, text, name, attrs, digest, json.dumps(["app.t"])),
    )
    return rows[0][0]


def test_forged_captured_events_are_refused_on_the_leaf(owned) -> None:
    c, app, _ = owned
    forged = {
        _forge(c, f"alter table app.t add column f1 int; alter role {app} superuser"): (
            "2 statements"
        ),
        _forge(c, f"do $$ begin execute 'alter role {app} superuser'; end $$"): "DoStmt",
        _forge(c, "alter table app.other add column f2 int"): "app.other",
        _forge(c, "alter table app.t disable trigger all"): "DISABLE TRIGGER ALL",
        _forge(c, "drop index app.other_pkey", "local-table: app.t"): "not an index of app.t",
    }
    c.sql("root", "insert into app.t values (6, 'after the forged events')")
    c.sql("root", "alter table app.t add column c int")
    c.sql("root", "insert into app.t values (7, 'and after a real one', 7)")
    c.catch_up("leaf")
    q = "select * from app.t order by id"
    assert c.sql("leaf", q) == c.sql("root", q)
    assert not _superuser(c, "leaf", app)
    assert _columns(c, "leaf", "app.other") == ["id"]
    assert c.sql("leaf", "select count(*) from pg_indexes where indexname = 'other_pkey'") == [(1,)]
    assert c.sql(
        "leaf", "select count(*) from pg_trigger where tgrelid = 'app.t'::regclass"
        " and tgenabled = 'D'"
    ) == [(0,)]  # fmt: skip
    refused = dict(c.sql("leaf", "select ev_id, reason from ferry.refused_event order by ev_id"))
    assert set(refused) == set(forged)
    for ev_id, words in forged.items():
        assert words in refused[ev_id], refused[ev_id]
    assert c.sql("leaf", "select cur_error from ferry_node.local_state") == [(None,)]
    status = c.cli("leaf", "status")
    last = max(forged)
    assert f"Refused captured DDL: 5, last event {last} (ddl " in status.out, status.out
    with psycopg.connect(c.dsns["leaf"]) as conn:
        reading = read_node(conn, c.queue)
    assert reading is not None and reading.refused_ddl == 5  # pgferry_refused_ddl_total


def test_a_captured_statement_runs_as_the_leaf_tables_owner(owned) -> None:
    c, app, owner = owned
    with psycopg.connect(_as(c, "root", app), autocommit=True) as conn:
        conn.execute("alter table app.t add column who text default current_user")
        conn.execute("comment on column app.t.who is 'who added it'")
        conn.execute("create index t_who on app.t (who)")
    c.sql("root", "insert into app.t values (6, 'new', 'explicit')")
    c.catch_up("leaf")
    assert _columns(c, "leaf", "app.t") == ["id", "v", "who"]
    # The rows that were there took the default as the role that added the column.
    assert c.sql("root", "select distinct who from app.t where id <= 5") == [(app,)]
    assert c.sql("leaf", "select distinct who from app.t where id <= 5") == [(owner,)]
    assert c.sql("leaf", "select who from app.t where id = 6") == [("explicit",)]
    assert c.sql("leaf", "select count(*) from pg_indexes where indexname = 't_who'") == [(1,)]
    assert c.sql("leaf", "select col_description('app.t'::regclass, 3)") == [("who added it",)]
    assert c.sql("leaf", "select count(*) from ferry.refused_event") == [(0,)]
    # Back to the worker's own role after it: the batch's bookkeeping is the worker's.
    assert c.sql("leaf", "select cur_error from ferry_node.local_state") == [(None,)]


def test_execute_refuses_a_file_named_like_captured_ddl(owned, tmp_path) -> None:
    c, _, _ = owned
    script = tmp_path / "ddl 0123456789ab: x.sql"
    script.write_text("alter table app.t add column z int;\n")
    result = c.cli("root", "execute", script)
    assert result.code != 0 and "named as capture-ddl names" in result.err
    assert len(result.err.strip().splitlines()) == 1
    assert _columns(c, "root", "app.t") == ["id", "v"]


def test_a_worker_that_may_not_become_the_owner_is_told_the_grant(owned) -> None:
    c, app, owner = owned
    with psycopg.connect(_as(c, "leaf", app)) as conn, pytest.raises(PgferryError) as failure:
        ddl_check.table_owner(conn, "app.t")
    assert str(failure.value) == (
        f"captured DDL on app.t runs as its owner {owner}, and role {app} may not SET ROLE"
        f" to it: grant {owner} to {app}, or skip-event"
    )
    c.sql("leaf", f"grant {owner} to {app}")
    try:
        with psycopg.connect(_as(c, "leaf", app)) as conn:
            assert ddl_check.table_owner(conn, "app.t") == owner
    finally:
        c.sql("leaf", f"revoke {owner} from {app}")


def test_the_root_refuses_subcommands_that_reach_past_the_table(owned) -> None:
    c, app, _ = owned
    triggers = "select tgname, tgenabled from pg_trigger order by 1"
    before = c.sql("root", triggers)
    for query, words in (
        ("alter table app.t disable trigger all", "disable trigger"),
        ("alter table app.t enable trigger user", "enable trigger"),
        ("alter table app.t force row level security", "force row level security"),
    ):
        with (
            psycopg.connect(_as(c, "root", app), autocommit=True) as conn,
            pytest.raises(psycopg.Error) as failure,
        ):
            conn.execute(query)
        assert (failure.value.diag.message_primary or "") == (
            f"pgferry: ALTER TABLE on replicated table app.t refused by capture-ddl ({words}):"
            " it would change rights, triggers, rules or other tables on every subscriber;"
            " run the DDL with capture-ddl off on each node, or through execute"
        )
    assert c.sql("root", triggers) == before
