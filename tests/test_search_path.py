"""No name pgferry writes can be taken over by a function planted in ``public``.

An ordinary role with CREATE on ``public`` (every database made before PostgreSQL 15 keeps
that grant) defines look-alikes of the functions pgferry calls, with argument types that
match a call better than pg_catalog's own (``pg_advisory_xact_lock(integer)`` for an int4
parameter, ``format(text, text)`` beside ``format(text, variadic "any")``) and others of the
same name.  Each records who called it.  The whole command set then runs on a root and a
leaf (and ``diff`` between them), the ticker and the leaf's worker looping: nothing may have
been called.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from pgferry import db
from pgferry.apply.worker import Worker
from pgferry.config import load_config
from pgferry.queue.ticker import TickerService
from pgferry.queue.ticker_settings import TickerSettings
from pgferry.testing.scenario import wait_until

INTRUDER = "ferry_intruder"

# (signature, result type, the pg_catalog call it passes on to)
LOOKALIKES = [
    ("pg_advisory_xact_lock(integer)", "void", "pg_catalog.pg_advisory_xact_lock($1::bigint)"),
    ("pg_advisory_xact_lock(smallint)", "void", "pg_catalog.pg_advisory_xact_lock($1::bigint)"),
    ("pg_advisory_lock(integer)", "void", "pg_catalog.pg_advisory_lock($1::bigint)"),
    ("pg_try_advisory_lock(integer)", "boolean", "pg_catalog.pg_try_advisory_lock($1::bigint)"),
    ("now()", "timestamptz", "pg_catalog.now()"),
    ("txid_current()", "bigint", "pg_catalog.txid_current()"),
    ("txid_current_snapshot()", "txid_snapshot", "pg_catalog.txid_current_snapshot()"),
    ("pg_current_snapshot()", "pg_snapshot", "pg_catalog.pg_current_snapshot()"),
    ("pg_current_xact_id()", "xid8", "pg_catalog.pg_current_xact_id()"),
    ("hashtext(text)", "integer", "pg_catalog.hashtext($1)"),
    ("hashtext(character varying)", "integer", "pg_catalog.hashtext($1)"),
    ("format(text, text)", "text", "pg_catalog.format($1, $2)"),
    ("format(text, text, text)", "text", "pg_catalog.format($1, $2, $3)"),
    ("format(text, name)", "text", "pg_catalog.format($1, $2)"),
    ("format(text, name, name)", "text", "pg_catalog.format($1, $2, $3)"),
    ("format(text, text, text, text)", "text", "pg_catalog.format($1, $2, $3, $4)"),
    ("jsonb_build_object(text, text)", "jsonb", "pg_catalog.jsonb_build_object($1, $2)"),
    ("quote_ident(name)", "text", "pg_catalog.quote_ident($1)"),
    ("length(name)", "integer", "pg_catalog.length($1)"),
    ("lower(name)", "text", "pg_catalog.lower($1)"),
    ("md5(name)", "text", "pg_catalog.md5($1)"),
    ("set_config(text, text, boolean)", "text", "pg_catalog.set_config($1, $2, $3)"),
    ("current_setting(text)", "text", "pg_catalog.current_setting($1)"),
    ("current_setting(character varying)", "text", "pg_catalog.current_setting($1)"),
    ("pg_notify(text, text)", "void", "pg_catalog.pg_notify($1, $2)"),
    ("to_regclass(text)", "regclass", "pg_catalog.to_regclass($1)"),
    ("string_to_array(text, text)", "text[]", "pg_catalog.string_to_array($1, $2)"),
    ("pg_sequence_last_value(regclass)", "bigint", "pg_catalog.pg_sequence_last_value($1)"),
]

# The test's own sessions pin their path too: only pgferry's calls are under test.
PINNED = "-c search_path=pg_catalog"


def run(dsn: str, query: str, params: tuple | None = None) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True, options=PINNED) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def plant(dsn: str) -> None:
    """The intruder's look-alikes in ``public``, each recording its caller."""
    run(
        dsn,
        f"do $$ begin if not exists (select from pg_catalog.pg_roles where rolname = '{INTRUDER}')"
        f" then create role {INTRUDER}; end if; end $$",
    )
    run(dsn, f"grant create, usage on schema public to {INTRUDER}")
    run(dsn, "create table public.planted_calls (fn text, who name)")
    run(dsn, f"alter table public.planted_calls owner to {INTRUDER}")
    run(dsn, "grant insert on public.planted_calls to public")
    with psycopg.connect(dsn, autocommit=True, options=PINNED) as conn:
        conn.execute(f"set role {INTRUDER}")
        for signature, result, passed_on in LOOKALIKES:
            body = (
                f"insert into public.planted_calls values ('{signature}', current_user);"
                f" return {passed_on};"
                if result != "void"
                else f"insert into public.planted_calls values ('{signature}', current_user);"
                f" perform {passed_on};"
            )
            conn.execute(
                f"create function public.{signature} returns {result} language plpgsql"
                f" as $f$ begin {body} end $f$"
            )


def planted_calls(dsn: str) -> list[tuple]:
    return run(dsn, "select fn, who from public.planted_calls order by fn")


def dbname(dsn: str) -> str:
    return conninfo.conninfo_to_dict(dsn)["dbname"]


@contextmanager
def looping(*services) -> Iterator[None]:
    """The services' run_forever in threads for the block."""
    threads = [threading.Thread(target=s.run_forever, daemon=True) for s in services]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        for s in services:
            s.stopping = True
        for t in threads:
            t.join(timeout=60)


def rows(dsn: str) -> list[tuple]:
    return run(dsn, "select id, v from public.t order by id")


@pytest.fixture
def planted(db_a: str, db_b: str) -> tuple[str, str]:
    for dsn in (db_a, db_b):
        plant(dsn)
        run(dsn, "create table public.t (id int primary key, v text)")
    run(db_a, "insert into public.t select g, 'v' || g from generate_series(1, 50) g")
    # The look-alikes do take the calls they match better (what the test relies on).
    probe = "select pg_advisory_xact_lock(7::int4), format('<%%s>', 'x'::text)"
    run(db_a, probe)
    with psycopg.connect(db_a, autocommit=True) as conn:  # the default path of a session
        conn.execute(probe, ())
    assert {fn for fn, _ in planted_calls(db_a)} == {
        "pg_advisory_xact_lock(integer)",
        "format(text, text)",
    }
    run(db_a, "truncate public.planted_calls")
    return db_a, db_b


def test_no_planted_function_is_called(
    planted: tuple[str, str], write_ini: Callable[..., Path], cli, tmp_path: Path
) -> None:
    root_db, leaf_db = planted
    root = write_ini("src", root_db, loop_delay="0.1", exception_sleep="0.1")
    leaf = write_ini("dst", leaf_db, loop_delay="0.1", exception_sleep="0.1")

    def ok(ini: Path, *args: object) -> str:
        res = cli(ini, *args)
        assert res.code == 0, res.err
        return res.out

    ok(root, "create-root", "src")
    ok(leaf, "create-leaf", "dst", f"--provider={root_db}")
    ok(root, "add-table", "public.t")
    ok(leaf, "add-table", "public.t")
    base = conninfo.conninfo_to_dict(root_db)
    base.pop("dbname")
    ticker = TickerService(
        TickerSettings(
            base_connstr=conninfo.make_conninfo(**base),
            database_list=[dbname(root_db)],
            ticker_period=0.1,
            maint_period=0.5,
            retry_period=0.5,
        )
    )
    worker = Worker(load_config(leaf))
    with looping(ticker, worker):
        wait_until(lambda: rows(leaf_db) == rows(root_db), 60, "the copy")
        # Replay of inserts, updates and deletes.
        run(root_db, "insert into public.t select g, 'n' || g from generate_series(51, 60) g")
        run(root_db, "update public.t set v = v || '!' where id % 3 = 0")
        run(root_db, "delete from public.t where id % 7 = 0")
        wait_until(lambda: rows(leaf_db) == rows(root_db), 60, "replay")
        ok(leaf, "compare")
        run(leaf_db, "set session_replication_role = replica; delete from public.t where id = 5")
        ok(leaf, "repair", "--apply", "--dir", tmp_path)
        assert rows(leaf_db) == rows(root_db)
        ok(leaf, "compare")
        res = cli("diff", root_db, "t", leaf_db, "public.t")  # a bare name is public's
        assert res.code == 0, res.err
        script = tmp_path / "add_w.sql"
        script.write_text("alter table public.t add column w int;\n")
        ok(root, "execute", script)
        wait_until(
            lambda: run(leaf_db, "select 1 from pg_attribute where attname = 'w'"
                        " and attrelid = 'public.t'::regclass"),
            60,
            "the script on the leaf",
        )  # fmt: skip
        for ini in (root, leaf):
            ok(ini, "status")
            ok(ini, "tables")
        ok(leaf, "remove-table", "public.t")
        ok(root, "remove-table", "public.t")
        run(root_db, "insert into public.t values (1000, 'after')")
    assert planted_calls(root_db) == []
    assert planted_calls(leaf_db) == []


def test_the_connect_string_options_are_kept_and_the_path_pinned_over_them(
    db_a: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = "-c statement_timeout=1234 -c search_path=public -c row_security=on"
    with db.connect(f"{db_a} options='{given}'") as conn:
        shown = [conn.execute(f"show {s}").fetchone()[0]
                 for s in ("statement_timeout", "search_path", "row_security")]  # fmt: skip
    assert shown == ["1234ms", "pg_catalog, pg_temp", "off"]
    # libpq reads PGOPTIONS only for a string without options: merged, it is kept too.
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=4321")
    with db.connect(db_a) as conn:
        shown = [conn.execute(f"show {s}").fetchone()[0] for s in ("lock_timeout", "search_path")]
    assert shown == ["4321ms", "pg_catalog, pg_temp"]
