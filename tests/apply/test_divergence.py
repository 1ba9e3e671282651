"""Replay counts what it finds missing on the subscriber instead of hiding it.

A row deleted on the leaf behind replication's back comes back with the next update of it
at the source, and a delete at the source of a row the leaf lacks finds nothing.  Both are
counted per table and batch (``ApplyStats``), added to the node's totals in the applying
transaction, logged, and shown by ``status``.
"""

from __future__ import annotations

import logging

import psycopg
import pytest

from pgferry.apply.replay.batch_end import record_divergence
from pgferry.apply.replay.one_connection import ApplyStats
from pgferry.node import model, status

TABLE = "create table public.t (id int primary key, v text)"


def _observe(worker) -> list[ApplyStats]:
    seen: list[ApplyStats] = []
    worker.batch_observers.append(lambda batch, stats, seconds: seen.append(stats))
    return seen


def _total(stats: list[ApplyStats]) -> ApplyStats:
    total = ApplyStats()
    for s in stats:
        total.add(s)
    return total


def _divergence(pair) -> model.Divergence:
    with psycopg.connect(pair.leaf_dsn, autocommit=True) as conn:
        node = model.require_node(conn, pair.queue)
        found = model.divergence(conn, pair.queue, node.worker_name)
    assert found is not None
    return found


def _setup(pair, leaf_ddl: str = TABLE) -> None:
    pair.root(TABLE)
    pair.root("insert into t select g, 'v' || g from generate_series(1, 10) g")
    pair.leaf(leaf_ddl)
    pair.add_tables("public.t")


def test_replay_counts_rows_missing_here(pair, caplog) -> None:
    _setup(pair)
    worker = pair.catch_up()
    seen = _observe(worker)
    # Behind replication's back: the leaf loses rows 1, 2 and 9.
    pair.leaf("set session_replication_role = replica; delete from t where id in (1, 2, 9)")
    pair.root("update t set v = 'changed' where id in (1, 2, 3)")  # 1, 2 are re-created
    pair.root("delete from t where id in (9, 10)")  # 9 finds no row
    with caplog.at_level(logging.WARNING, logger="pgferry.apply.replay.batch_end"):
        pair.catch_up(worker)
    # A batch that also inserts into the table is not counted: a key new in the batch
    # arrives collapsed as an update or a delete, like a missing row would.
    pair.root("insert into t values (11, 'new')")
    pair.root("update t set v = 'new too' where id = 11")
    pair.catch_up(worker)
    pair.same("t")  # repaired, as before
    total = _total(seen)
    assert (total.recreated, total.missing_deletes) == (2, 1)
    assert total.diverged == {"public.t": (2, 1)}
    # The worker adds them to the node's totals in the transaction that applied them.
    found = _divergence(pair)
    assert (found.rows, found.deletes, found.tables) == (2, 1, "public.t")
    assert found.since is not None and found.last is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "re-created 2 rows of public.t missing here, 1 delete found no row" in m for m in warnings
    ), warnings

    # Replay of a leaf in step counts nothing more.
    seen.clear()
    pair.root("update t set v = 'again' where id in (1, 2, 3)")
    pair.root("delete from t where id = 3")
    pair.root("insert into t values (12, 'x')")
    pair.catch_up(worker)
    pair.root("update t set v = 'and again' where id = 12")
    pair.catch_up(worker)
    pair.same("t")
    total = _total(seen)
    assert (total.recreated, total.missing_deletes, total.diverged) == (0, 0, {})
    assert (_divergence(pair).rows, _divergence(pair).deletes) == (2, 1)


def test_partitioned_destination_counts_too(pair) -> None:
    _setup(pair, "create table public.t (id int primary key, v text) partition by range (id)")
    pair.leaf("create table public.t_low partition of public.t for values from (0) to (5)")
    pair.leaf("create table public.t_high partition of public.t for values from (5) to (1000)")
    worker = pair.catch_up()
    seen = _observe(worker)
    pair.leaf("set session_replication_role = replica; delete from t where id in (2, 7)")
    pair.root("update t set v = 'changed' where id in (2, 3, 7, 8)")
    pair.catch_up(worker)
    pair.root("insert into t values (101, 'new')")
    pair.catch_up(worker)
    pair.same("t")
    total = _total(seen)
    assert (total.recreated, total.missing_deletes) == (2, 0)  # one in each partition


def test_totals_add_up_and_status_shows_them(pair) -> None:
    _setup(pair)
    pair.catch_up()
    with psycopg.connect(pair.leaf_dsn) as conn:
        node = model.require_node(conn, pair.queue)
        st = status.read_node_status(conn, pair.queue, node.node_name)
        assert not any(line.startswith("Diverged") for line in status._info_lines(st))
        one = ApplyStats(recreated=3, missing_deletes=1, diverged={"public.t": (3, 1)})
        two = ApplyStats(missing_deletes=1, diverged={"public.u": (0, 1)})
        with conn.transaction():
            record_divergence(conn, pair.queue, node.consumer_name, one, tick_id=7)
        with conn.transaction():
            record_divergence(conn, pair.queue, node.consumer_name, ApplyStats())  # none
        with pytest.raises(RuntimeError), conn.transaction():
            record_divergence(conn, pair.queue, node.consumer_name, two)
            raise RuntimeError("the batch fails later: its divergence goes with it")
        with conn.transaction():
            record_divergence(conn, pair.queue, node.consumer_name, two)
        st = status.read_node_status(conn, pair.queue, node.node_name)
    assert (st.diverged_rows, st.diverged_deletes, st.diverged_tables) == (3, 2, "public.u")
    assert st.diverged_since is not None and st.diverged_last is not None
    assert st.diverged_since <= st.diverged_last
    line = next(line for line in status._info_lines(st) if line.startswith("Diverged"))
    assert line.startswith("Diverged: 3 rows re-created, 2 deletes of missing rows (since ")
    assert line.endswith(", last in public.u)")
    item = status.StatusReport(pair.queue, node.node_name, [st]).to_json()["nodes"][0]
    assert (item["diverged_rows"], item["diverged_deletes"]) == (3, 2)
    assert item["diverged_since"] == st.diverged_since.isoformat()


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])
def test_a_large_batch_of_updates_counts_rows_missing_here(pair, partitioned: bool) -> None:
    """A batch of updates only of a table (no insert, no delete), large enough for a hash
    join, is applied with an UPDATE and an insert of the keys it did not find: every
    missing key comes back and is counted, exactly, on a plain or a partitioned
    destination."""
    rows = 1500
    pair.root(TABLE)
    pair.root(f"insert into t select g, 'v' || g from generate_series(1, {rows}) g")
    if partitioned:
        pair.leaf("create table public.t (id int primary key, v text) partition by range (id)")
        pair.leaf("create table public.t_low partition of public.t for values from (0) to (700)")
        pair.leaf("create table public.t_high partition of public.t for values from (700) to (1e6)")
    else:
        pair.leaf(TABLE)
    pair.add_tables("public.t")
    worker = pair.catch_up()
    seen = _observe(worker)
    pair.leaf("set session_replication_role = replica; delete from t where id in (5, 699, 1200)")
    pair.root("update t set v = v || ' changed'")  # every row, in one batch
    pair.catch_up(worker)
    pair.same("t")
    total = _total(seen)
    assert (total.upserts, total.recreated, total.missing_deletes) == (rows, 3, 0)
    assert total.diverged == {"public.t": (3, 0)}
    # In step again: nothing counted.
    seen.clear()
    pair.root("update t set v = v || ' again'")
    pair.catch_up(worker)
    pair.same("t")
    assert (_total(seen).recreated, _total(seen).upserts) == (0, rows)
