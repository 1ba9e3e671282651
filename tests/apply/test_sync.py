"""compare / repair in a node config, at one tick, while the source keeps changing."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import psycopg
import pytest

from pgferry.cli.main import main
from pgferry.errors import DivergedProvider, PgferryError
from pgferry.polling import wait_until
from pgferry.sync.point import sync_point
from pgferry.testing.load import Load


@contextmanager
def running(pair, write: bool = True):
    """Leaf worker, a ticker and (optionally) a writer on the root, in threads."""

    def write_some(conn: psycopg.Connection, done: int) -> None:
        n = done + 1
        conn.execute("update t set v = v + 1 where id = %s", (n % 500 + 1,))
        conn.execute("insert into t values (%s, 0) on conflict do nothing", (1000 + n,))

    with pair.running(every=0.5) as worker:
        if not write:
            yield worker
            return
        with Load(pair.root_dsn, write_some, every=0.01, transaction=False):
            yield worker


def test_compare_and_repair_under_load(pair, capsys) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.root("insert into t select g, 0 from generate_series(1, 700) g")
    pair.add_tables("public.t")
    pair.catch_up(pair.worker())
    ini = str(pair.leaf_cfg.path)
    with running(pair):
        assert main([ini, "compare"]) == 0
        assert "Results do not match" not in capsys.readouterr().out
        # A row changed behind replication's back: found, then fixed.
        pair.leaf("set session_replication_role = replica; update t set v = -100 where id = 600")
        assert main([ini, "compare"]) == 1
        assert "public.t: Results do not match!" in capsys.readouterr().out
        assert main([ini, "repair", "--apply", "--dir", str(pair.leaf_cfg.path.parent)]) == 0
        assert main([ini, "compare", "public.t"]) == 0


def test_compare_and_repair_a_name_that_needs_quoting(pair, capsys) -> None:
    """Mixed case, a space and a non-ASCII letter in both parts of the name, on the
    driver (no Spark): a row deleted and one changed on the leaf are found and fixed."""
    table = '"Sales Ü"."Mixed T"'
    for side in (pair.root, pair.leaf):
        side('create schema "Sales Ü"')
        side(f'create table {table} (id int primary key, "Qty" int)')
    pair.root(f"insert into {table} select g, g from generate_series(1, 50) g")
    pair.add_tables(table)
    pair.catch_up(pair.worker())
    ini, fixes = str(pair.leaf_cfg.path), str(pair.leaf_cfg.path.parent)
    with running(pair, write=False):
        assert main([ini, "compare"]) == 0
        assert f"{table}: srcdb: 50 rows" in capsys.readouterr().out
        pair.leaf(f"set session_replication_role = replica; delete from {table} where id = 9")
        pair.leaf(f'set session_replication_role = replica; update {table} set "Qty" = -1'
                  " where id = 10")  # fmt: skip
        assert main([ini, "compare", table]) == 1
        assert f"{table}: Results do not match!" in capsys.readouterr().out
        assert main([ini, "repair", "--apply", "--dir", fixes, table]) == 0
        assert main([ini, "compare"]) == 0
    pair.same(table)


def test_compare_needs_a_running_worker(pair) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t")
    pair.catch_up(pair.worker())
    cfg = pair.leaf_cfg
    cfg.values["compare_wait"] = "1"
    with (
        pytest.raises(PgferryError, match="Consumer lagging too much, cannot proceed"),
        sync_point(cfg),
    ):
        pass
    assert pair.leaf("select count(*) from ferry.sync_request") == [(0,)]


def test_a_request_left_by_a_killed_compare_does_not_stall_the_worker(pair) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t")
    worker = pair.catch_up(pair.worker())
    # compare was killed while choosing its tick: the request has none.
    pair.leaf(
        "insert into ferry.sync_request (queue_name, consumer_name, tick_id, requested_at)"
        " select queue_name, consumer_name, 0, now() - interval '10 seconds'"
        "   from ferry_node.local_state",
    )
    pair.root("insert into t values (1, 1)")
    pair.tick()
    assert worker.work() is False  # a fresh request: compare may still be choosing
    assert pair.leaf("select count(*) from t") == [(0,)]
    pair.leaf("update ferry.sync_request set requested_at = now() - interval '2 minutes'")
    pair.catch_up(worker)
    assert pair.leaf("select count(*) from ferry.sync_request") == [(0,)]
    pair.same("t")


@pytest.mark.slow
def test_compare_and_repair_on_spark_connect(pair, capsys, connect_server, monkeypatch) -> None:
    """The node's compare and repair run their Spark jobs on the server named by
    spark_remote (as for tables too large for the command), with the worker replaying."""
    from pgferry.pipeline import spark_connect
    from pgferry.sync import compare, repair_local

    monkeypatch.setattr(compare, "LOCAL_PAGES", -1)
    monkeypatch.setattr(repair_local, "LOCAL_ROWS", -1)
    asked: list[str] = []
    session_on = spark_connect.connect_session
    monkeypatch.setattr(
        spark_connect, "connect_session", lambda url, s: asked.append(url) or session_on(url, s)
    )
    for side in (pair.root, pair.leaf):
        side('create table public."Mixed T" (id int primary key, v int)')
    pair.root('insert into "Mixed T" select g, 0 from generate_series(1, 700) g')
    pair.add_tables('public."Mixed T"')
    pair.catch_up(pair.worker())
    ini = str(pair.leaf_cfg.path)
    remote = ["--set", f"spark_remote={connect_server.url}"]
    with running(pair, write=False):
        pair.leaf('set session_replication_role = replica; delete from "Mixed T" where id = 9')
        assert main([ini, "compare", *remote]) == 1
        assert 'public."Mixed T": Results do not match!' in capsys.readouterr().out
        repair = [ini, "repair", "--apply", "--dir", str(pair.leaf_cfg.path.parent), *remote]
        assert main(repair) == 0
        assert main([ini, "compare", *remote]) == 0
    pair.same('"Mixed T"')
    assert len(asked) == 3 and set(asked) == {connect_server.url}


def test_repair_without_names_repairs_what_has_a_key(pair, capsys, monkeypatch) -> None:
    """repair with no table names on the default configuration: the keyed table is repaired
    (its whole read over the driver's limit, narrowed to compare's ranges), the keyless
    one is named for a resync, the exit is 1, and no Spark session starts."""
    from pgferry.pipeline import keyranges, spark
    from pgferry.sync import compare, repair_local

    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
        side('create table public."Log Nk" (a int, b text)')
    pair.root("insert into t select g, 0 from generate_series(1, 3000) g")
    pair.root("insert into \"Log Nk\" select g % 5, 'x' from generate_series(1, 40) g")
    pair.add_tables("public.t", 'public."Log Nk"')
    pair.catch_up(pair.worker())
    for side in (pair.root, pair.leaf):
        side("analyze t")  # the planner's estimates say what a read holds
    pair.leaf(
        "set session_replication_role = replica; update t set v = -1 where id = 1700;"
        " delete from t where id = 12; insert into \"Log Nk\" values (1, 'x')"
    )
    # Reading t whole is over the driver's limit; one bucket of it is not.
    monkeypatch.setattr(compare, "LOCAL_PAGES", 0)
    monkeypatch.setattr(repair_local, "LOCAL_MODE_ROWS", 1000)
    monkeypatch.setattr(keyranges, "BUCKET_ROWS", 100)
    started: list[str] = []
    monkeypatch.setattr(spark, "spark_for", lambda options: started.append(options) or 1 / 0)
    ini = str(pair.leaf_cfg.path)
    with running(pair, write=False):
        code = main([ini, "repair", "--apply", "--dir", str(pair.leaf_cfg.path.parent)])
    out = capsys.readouterr().out
    assert code == 1
    assert started == []
    assert "public.t: 1 inserts, 1 updates, 0 deletes applied" in out
    resync = [line for line in out.splitlines() if "resync" in line]
    assert resync == [
        'public."Log Nk": differs and has no key, rows cannot be matched one by one: resync it'
    ]
    pair.same("t")
    assert pair.leaf('select count(*) from "Log Nk"') == [(41,)]  # left for the resync


def test_a_provider_tick_made_again_at_another_time_is_not_compared(pair) -> None:
    """The leaf applied tick T; the provider lost it (a standby promoted without it) and
    compare's own tick there gets that id again, made at another time: the leaf's data
    at its tick T is not the provider's at its tick T.  The command fails naming the
    diverged provider instead of comparing two different points."""
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t")
    pair.root("insert into t values (1, 1)")
    worker = pair.catch_up(pair.worker())
    at = pair.last_tick()
    assert at is not None
    # The provider without tick T (and any after it): its next tick, compare's, is made
    # under that id.
    pair.root("delete from ferry_queue.tick where tick_id >= %s", (at,))
    pair.root("select setval(queue_tick_seq, %s) from ferry_queue.queue", (at - 1,))
    outcome: dict[str, BaseException | int] = {}

    def compare() -> None:
        try:
            with sync_point(pair.leaf_cfg) as point:
                outcome["tick"] = point.tick_id
        except PgferryError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=compare)
    thread.start()
    # The worker steps once compare's tick is made (it would find its own tick gone).
    wait_until(
        lambda: (
            pair.leaf("select count(*) from ferry.sync_request where tick_id = %s", (at,)) == [(1,)]
        ),
        timeout=30,
        interval=0.05,
    )
    while thread.is_alive():  # the leaf's worker serves the request, step by step
        worker.work()
        thread.join(0.05)
    assert "tick" not in outcome, f"compared at tick {outcome.get('tick')}"
    error = outcome["error"]
    assert isinstance(error, DivergedProvider), error
    assert f"applied tick {at} made at" in str(error)
    assert f"the provider's tick {at} was made at" in str(error)
    assert pair.root("select count(*) from ferry_queue.tick where tick_id = %s", (at,)) == [(1,)]
    assert pair.leaf("select count(*) from ferry.sync_request") == [(0,)]
