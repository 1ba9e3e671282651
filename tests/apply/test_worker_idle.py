"""An idle worker writes nothing and asks its provider one read-only question per loop; a
tick, heard or not, and a local change wake it.

The rows checked are the ones an idle loop used to write: the consumer's row on the
provider (``next_batch`` stamps it) and the node's ``local_state`` (the heartbeat).
``watermark_period`` is set high so that the test does not depend on the clock.
"""

from __future__ import annotations

import time

from pgferry.apply.worker import Worker
from pgferry.testing.scenario import step_until


def _setup(pair) -> Worker:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key)")
    pair.add_tables("public.t")
    worker = pair.worker(watermark_period="3600")
    pair.catch_up(worker)
    # After its last batch the worker looks once more, and then has nothing to do.
    while worker.work():
        pass
    for _ in range(3):
        worker.work()
    return worker


def _apply(pair, worker: Worker, tick: int) -> None:
    step_until(worker, lambda: pair.last_tick() == tick, 30, f"tick {tick} applied")


def _unchanged(pair):
    return (
        pair.root("select xmin::text, sub_active from ferry_queue.subscription order by sub_id"),
        pair.leaf("select xmin::text, last_seen from ferry_node.local_state"),
    )


def test_idle_loops_write_nothing_until_a_tick(pair) -> None:
    worker = _setup(pair)
    before = _unchanged(pair)
    for _ in range(20):
        assert worker.work() is False
        time.sleep(0.02)
    assert _unchanged(pair) == before
    pair.root("insert into t values (1)")
    _apply(pair, worker, pair.tick())
    assert pair.leaf("select id from t") == [(1,)]


def test_a_tick_nobody_announced_is_taken(pair) -> None:
    """The provider is asked every loop: a tick whose notification never came (a lost
    connection, a provider without notifications) is applied all the same."""
    worker = _setup(pair)
    assert worker.conns.provider is not None
    worker.conns.provider.execute("unlisten *")
    pair.root("insert into t values (2)")
    tick = pair.tick()
    _apply(pair, worker, tick)
    assert pair.leaf("select id from t") == [(2,)]


def test_a_pause_is_confirmed_at_once(pair) -> None:
    worker = _setup(pair)
    # What `pause` does: the flag, which clears uptodate (ferry_node.local_state_guard); the
    # worker's next write sets it again, and `pause --wait` waits for that.
    pair.leaf("update ferry_node.local_state set paused = true")
    assert pair.leaf("select uptodate from ferry_node.local_state") == [(False,)]
    confirmed = "select uptodate from ferry_node.local_state"
    step_until(worker, lambda: pair.leaf(confirmed) == [(True,)], 10, "the pause confirmed")


def test_a_table_added_on_the_node_wakes_it(pair) -> None:
    worker = _setup(pair)
    for side in (pair.root, pair.leaf):
        side("create table public.u (id int primary key)")
    pair.root("insert into u values (7)")
    pair.add_tables("public.u")
    state = "select merge_state from ferry.table_info where table_name = 'public.u'"

    def copied() -> bool:
        pair.tick()
        return pair.leaf(state) == [("ok",)]

    step_until(worker, copied, 60, "the added table copied")
    assert pair.leaf("select id from u") == [(7,)]


def test_an_idle_root_backs_off_and_still_sees_a_sequence_move(pair) -> None:
    import psycopg

    from pgferry.node import seqops

    for side in (pair.root, pair.leaf):
        side("create sequence public.s")
    for cfg, dsn in ((pair.root_cfg, pair.root_dsn), (pair.leaf_cfg, pair.leaf_dsn)):
        with psycopg.connect(dsn) as conn:
            seqops.add_seqs(cfg, conn, ["public.s"])
    root = pair.root_worker()
    while root.work():
        pass
    root.work()  # takes the wake state as its baseline
    state = pair.root("select xmin::text, last_seen from ferry_node.local_state")
    for _ in range(6):
        assert root.work() is False
    assert root._idle.quiet_loops >= 5
    assert root._idle.root_wait(1.0) == 8.0
    assert pair.root("select xmin::text, last_seen from ferry_node.local_state") == state
    # A sequence that moved is published by the next loop, whatever the wait was.
    pair.root("select setval('public.s', 100000)")
    root.work()
    published = pair.root("select last_value from ferry.seq_info where seq_name = 'public.s'")
    assert published == [(100000 + seqops.DEFAULT_SEQ_BUFFER,)]
