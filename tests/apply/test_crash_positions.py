"""Positions survive an immediate stop of either server under synchronous_commit = off.

Both clusters here write their WAL lazily (``wal_writer_delay`` 10 s): a transaction
committed asynchronously just before ``pg_ctl stop -m immediate`` is lost, as on a real
crash.  The apply transaction and every tick must still be there afterwards.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from pgferry.errors import NodeError
from pgferry.testing.cluster import LocalCluster, make_cluster

_n = itertools.count(1)
LAZY = {"synchronous_commit": "off", "wal_writer_delay": "10s"}


@pytest.fixture(scope="module")
def lazy_root() -> Iterator[LocalCluster]:
    cluster = make_cluster("lazy-root", **LAZY)
    yield cluster
    cluster.destroy()


@pytest.fixture(scope="module")
def lazy_leaf() -> Iterator[LocalCluster]:
    cluster = make_cluster("lazy-leaf", **LAZY)
    yield cluster
    cluster.destroy()


@pytest.fixture
def db_a(lazy_root: LocalCluster) -> str:
    return lazy_root.createdb(f"crash_root_{next(_n)}")


@pytest.fixture
def db_b(lazy_leaf: LocalCluster) -> str:
    return lazy_leaf.createdb(f"crash_leaf_{next(_n)}")


def _table(pair) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t")


def _consumer_tick(pair) -> int:
    rows = pair.root(
        "select sub_last_tick from ferry_queue.subscription s"
        " join ferry_queue.queue q on q.queue_id = s.sub_queue where q.queue_name = %s"
        " and s.sub_consumer not like '.%%'",  # watermark holds are not the worker's position
        (pair.queue,),
    )
    return rows[0][0]


def test_subscriber_crash_keeps_the_applied_batch(pair, lazy_leaf) -> None:
    _table(pair)
    worker = pair.catch_up()
    pair.root("insert into t select g, g from generate_series(1, 100) g")
    tick = pair.tick()
    worker.work()  # applied here, finished on the provider
    assert pair.last_tick() == tick
    assert _consumer_tick(pair) == tick
    worker.conns.close()
    lazy_leaf.stop("immediate")
    lazy_leaf.start()
    assert pair.last_tick() == tick  # the apply committed durably
    pair.root("update t set v = -v where id <= 10")
    pair.catch_up(pair.worker())
    pair.same("t")


def test_provider_crash_keeps_ticks_and_replay_goes_on(pair, lazy_root) -> None:
    _table(pair)
    worker = pair.catch_up()
    pair.root("insert into t select g, g from generate_series(1, 50) g")
    tick = pair.tick()
    worker.work()
    assert pair.last_tick() == tick
    worker.conns.close()
    lazy_root.stop("immediate")
    lazy_root.start()
    assert pair.root("select max(tick_id) from ferry_queue.tick") == [(tick,)]
    assert pair.last_tick() == tick
    pair.root("insert into t select g, g from generate_series(51, 60) g")
    pair.catch_up(pair.worker())
    pair.same("t")
    assert _consumer_tick(pair) == pair.last_tick()


def _tick_before(pair, tick: int) -> int:
    return pair.root("select max(tick_id) from ferry_queue.tick where tick_id < %s", (tick,))[0][0]


def _move_leaf_to(pair, tick: int) -> None:
    """The leaf's recorded position set back to ``tick``: its id and the provider's time of
    it, as a lost commit leaves them (the two make the tick's identity)."""
    made = pair.root("select tick_time from ferry_queue.tick where tick_id = %s", (tick,))[0][0]
    pair.leaf(
        "update ferry_node.local_state set last_tick_id = %s, last_tick_time = %s", (tick, made)
    )


def test_a_node_behind_the_provider_rewinds_it(pair) -> None:
    _table(pair)
    worker = pair.catch_up()
    pair.root("insert into t select g, g from generate_series(1, 20) g")
    applied = pair.tick()
    worker.work()
    assert pair.last_tick() == applied
    # As if that apply had been lost here: its rows and its recorded tick are gone.
    pair.leaf("set session_replication_role = replica; truncate t")
    _move_leaf_to(pair, _tick_before(pair, applied))
    pair.root("insert into t values (1000, 1000)")
    pair.catch_up(worker)
    pair.same("t")
    assert _consumer_tick(pair) == pair.last_tick()


def test_events_gone_stop_with_what_to_do(pair) -> None:
    _table(pair)
    worker = pair.catch_up()
    pair.root("insert into t values (1, 1)")
    pair.catch_up(worker)
    _move_leaf_to(pair, _tick_before(pair, pair.last_tick()))
    # Rotation has emptied the event tables past every tick made so far.
    pair.root("update ferry_queue.queue set queue_rotated_xid = pg_current_xact_id()")
    pair.root("insert into t values (2, 2)")
    pair.tick()
    with pytest.raises(NodeError, match="no longer in queue.*--reset.*resync"):
        worker.work()
    assert pair.leaf("select id from t order by id") == [(1,)]
