"""remove-table / remove-seq on a root (or a branch) reach every node below it.

The removal queues an event in the node's queue in the same transaction; each subscriber's
worker detaches the table (or sequence) in the transaction that applies the batch holding
it, keeps its rows, and a branch passes the event on.  A table removed while it is still
being copied ends removed too, and its copy's consumer on the provider is dropped.
"""

from __future__ import annotations

import logging
import threading

import psycopg
import pytest

from pgferry import settings
from pgferry.apply.worker import Worker
from pgferry.config import Config
from pgferry.node import seqops, tableops
from pgferry.queue import api as queue_api
from pgferry.testing.cascade import sql_rows
from pgferry.testing.scenario import step_until

DDL = "create table public.{} (id int primary key, v text)"
ROWS = "insert into public.{} select g, 'x' from generate_series(1, 10) g"
TRIGGERS = (
    "select count(*) from pg_trigger where tgrelid = 'public.{}'::regclass and not tgisinternal"
)


_sql = sql_rows


def _remove(cfg: Config, *names: str, all_: bool = False) -> list[str]:
    with psycopg.connect(cfg.get(settings.DB)) as conn:
        return tableops.remove_tables(cfg, conn, list(names), all_, False)


def _tables(dsn: str) -> dict[str, str | None]:
    return dict(_sql(dsn, "select table_name, merge_state from ferry.table_info where local"))


def _rows(dsn: str, table: str) -> list[tuple]:
    return _sql(dsn, f"select id, v from public.{table} order by id")


def _same_tables(pair, *tables: str) -> None:
    """The tables on both sides with equal rows, replicated from the start (no copy)."""
    for table in tables:
        for side in (pair.root, pair.leaf):
            side(DDL.format(table))
            side(ROWS.format(table))
    pair.add_tables(*(f"public.{t}" for t in tables), expect_sync=True)


def _removal_lines(caplog: pytest.LogCaptureFixture, what: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO
        and r.getMessage().startswith(f"{what} ")
        and "no longer replicates" in r.getMessage()
    ]


def test_remove_on_root_reaches_leaf(pair, caplog) -> None:
    _same_tables(pair, "a", "b")
    pair.catch_up()
    # A change made just before the removal lands in the same batch and is applied.
    pair.root("update a set v = 'before' where id <= 5")
    assert _remove(pair.root_cfg, "a") == ["public.a"]
    pair.root("insert into a values (100, 'after')")  # no capture any more
    caplog.set_level(logging.INFO, logger="pgferry")
    pair.catch_up()

    assert _tables(pair.leaf_dsn) == {"public.b": "ok"}
    assert _rows(pair.leaf_dsn, "a") == [(i, "before" if i <= 5 else "x") for i in range(1, 11)]
    assert pair.leaf(TRIGGERS.format("a")) == [(0,)]  # the deny triggers went with it
    assert _removal_lines(caplog, "Table") == [
        "Table public.a removed: rootnode no longer replicates it (was ok; its rows stay)"
    ]

    # Later changes on the root never reach the leaf's copy of a; b goes on.
    before = _rows(pair.leaf_dsn, "a")
    pair.root("update a set v = 'later'")
    pair.root("insert into b values (11, 'new')")
    pair.catch_up()
    assert _rows(pair.leaf_dsn, "a") == before
    pair.same("b")
    pair.leaf("insert into a values (200, 'local')")  # writable again on the leaf


def test_remove_all_on_root(pair) -> None:
    _same_tables(pair, "a", "b")
    pair.catch_up()
    assert sorted(_remove(pair.root_cfg, all_=True)) == ["public.a", "public.b"]
    pair.root("delete from a")
    pair.catch_up()
    assert _tables(pair.leaf_dsn) == {}
    assert len(_rows(pair.leaf_dsn, "a")) == 10
    assert len(_rows(pair.leaf_dsn, "b")) == 10


def test_remove_not_registered_changes_nothing(pair, cli) -> None:
    _same_tables(pair, "a")
    pair.root("create sequence public.s")
    for cfg in (pair.root_cfg, pair.leaf_cfg):
        res = cli(cfg.path, "remove-table", "public.nope", "public.a")
        assert res.code != 0
        assert res.err.strip().splitlines() == ["pgferry: Table not registered: public.nope"]
    res = cli(pair.root_cfg.path, "remove-seq", "public.s")
    assert res.code != 0
    assert res.err.strip().splitlines() == ["pgferry: Sequence not registered: public.s"]
    assert _tables(pair.root_dsn) == {"public.a": "ok"}
    assert _tables(pair.leaf_dsn) == {"public.a": "ok"}
    queued = pair.root("select count(*) from ferry_queue.event where ev_type like 'ferry.remove%'")
    assert queued == [(0,)]
    assert pair.root(TRIGGERS.format("a")) != [(0,)]


def test_remove_seq_on_root(pair, caplog) -> None:
    for side in (pair.root, pair.leaf):
        side("create sequence public.s")
    pair.root("select nextval('public.s') from generate_series(1, 5)")
    with psycopg.connect(pair.root_dsn) as conn:
        seqops.add_seqs(pair.root_cfg, conn, ["public.s"])
    with psycopg.connect(pair.leaf_dsn) as conn:
        seqops.add_seqs(pair.leaf_cfg, conn, ["public.s"])
    pair.root_worker().work()  # publishes the sequence ahead
    pair.catch_up()
    value = pair.leaf("select last_value from public.s")[0][0]
    assert value >= 5

    with psycopg.connect(pair.root_dsn) as conn:
        assert seqops.remove_seqs(pair.root_cfg, conn, ["public.s"]) == ["public.s"]
    caplog.set_level(logging.INFO, logger="pgferry")
    pair.catch_up()
    assert pair.leaf("select seq_name from ferry.seq_info") == []
    assert pair.leaf("select last_value from public.s")[0][0] == value  # the value stays
    assert _removal_lines(caplog, "Sequence") == [
        "Sequence public.s removed: rootnode no longer replicates it"
    ]


def _run(worker: Worker, done, timeout: float = 60) -> None:
    step_until(worker, done, timeout, "the removal to travel")


def test_branch_chain_follows(make_cascade, db_a, db_b, new_db_b) -> None:
    db_c = new_db_b(None)
    c = make_cascade()
    root = c.node("root", db_a, "root")
    branch = c.node("branch", db_b, "branch", "root")
    c.node("leaf", db_c, "leaf", "branch")
    for dsn in (db_a, db_b, db_c):
        for table in "abc":
            _sql(dsn, DDL.format(table))
            _sql(dsn, ROWS.format(table))
    for name, expect in (("root", False), ("branch", True), ("leaf", True)):
        c.add(name, "public.a", "public.b", "public.c", expect_sync=expect)
    tick = c.tick

    def at(dsn: str, tick_id: int) -> bool:
        return (_sql(dsn, "select last_tick_id from ferry_node.local_state")[0][0] or 0) >= tick_id

    bw, lw = c.worker("branch"), c.worker("leaf")

    def flow() -> None:
        target = tick()
        _run(bw, lambda: at(db_b, target))
        _run(lw, lambda: at(db_c, target))

    try:
        flow()
        # On the root: the branch and the leaf below it follow.
        _remove(root, "a")
        _sql(db_a, "update a set v = 'after'; update c set v = 'c1'")
        flow()
        assert set(_tables(db_b)) == set(_tables(db_c)) == {"public.b", "public.c"}
        # On the branch, for its own subtree: the root keeps b, the leaf drops it.  (The
        # leaf stops at the end of the batch that carries the removal, so the root's
        # changes are made once it has travelled.)
        _remove(branch, "b")
        flow()
        assert set(_tables(db_c)) == {"public.c"}
        _sql(db_a, "update b set v = 'after'; update c set v = 'c2'")
        flow()
        assert set(_tables(db_a)) == {"public.b", "public.c"}
        assert set(_tables(db_b)) == set(_tables(db_c)) == {"public.c"}
        for dsn in (db_b, db_c):
            assert _rows(dsn, "a") == [(i, "x") for i in range(1, 11)]
            assert _rows(dsn, "b") == [(i, "x") for i in range(1, 11)]
            assert _rows(dsn, "c") == [(i, "c2") for i in range(1, 11)]
        assert bw.errors_total == lw.errors_total == 0
    finally:
        bw.shutdown()
        lw.shutdown()


class _FakeSpark:
    class sparkContext:  # noqa: N801 - the attribute CopyRun reaches for
        @staticmethod
        def setJobGroup(*_args) -> None:  # noqa: N802
            pass

        @staticmethod
        def cancelJobGroup(*_args) -> None:  # noqa: N802
            pass


@pytest.mark.parametrize("state", [None, "in-copy", "catching-up"])
def test_removed_while_copying(pair, monkeypatch, state: str | None) -> None:
    """The leaf's copy of t never finishes before the root removes t: t ends removed, its
    rows are left alone and the copy's consumer on the root is gone."""
    import pgferry.pipeline.copy as copy_mod
    from pgferry.apply import copies
    from pgferry.apply.replay import spark_session

    for side in (pair.root, pair.leaf):
        side(DDL.format("t"))
    pair.root(ROWS.format("t"))
    pair.leaf("insert into t values (1, 'leaf')")
    release = threading.Event()

    def fake_copy(spark, src, dst, tasks, **kwargs):
        if state == "in-copy":
            release.wait(60)
        snap = _sql(src, "select pg_current_snapshot()::text")[0][0]
        return copy_mod.CopyResult(snapshot=snap)

    monkeypatch.setattr(copy_mod, "copy_tables", fake_copy)
    monkeypatch.setattr(spark_session.WorkerSpark, "get", lambda self: _FakeSpark())
    if state is None:  # the copy never starts
        monkeypatch.setattr(copies.Copies, "start_pending", lambda *a, **k: 0)
    # The group never catches up, so it stays in the state under test.
    monkeypatch.setattr(copies.Copies, "catch_up", lambda *a, **k: (False, None))
    pair.add_tables("public.t")
    w = pair.worker()
    pair.tick()

    def leaf_state() -> str | None:
        return _tables(pair.leaf_dsn).get("public.t")

    _run(w, lambda: leaf_state() == state)
    consumer = _sql(pair.leaf_dsn, "select copy_consumer from ferry.table_info")[0][0]
    if state is None:
        assert consumer is None
    else:
        with psycopg.connect(pair.root_dsn, autocommit=True) as conn:
            assert consumer in queue_api.consumers(conn, pair.queue)

    _remove(pair.root_cfg, "t")
    pair.catch_up(w)  # nothing is pending once t is gone
    assert _tables(pair.leaf_dsn) == {}
    with psycopg.connect(pair.root_dsn, autocommit=True) as conn:
        left = [c for c in queue_api.consumers(conn, pair.queue) if ".copy." in c]
    assert left == []
    release.set()
    for run in list(w._copies.runs.values()):
        assert run.thread is not None
        run.thread.join(30)
    pair.catch_up(w)
    assert _tables(pair.leaf_dsn) == {}
    assert _rows(pair.leaf_dsn, "t") == [(1, "leaf")]
    assert w.errors_total == 0
