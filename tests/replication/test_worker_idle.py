"""An idle worker writes nothing and asks its provider nothing; a tick or a local change
wakes it.

The rows checked are the ones an idle loop used to write: the consumer's row on the
provider (``next_batch`` stamps it) and the node's ``local_state`` (the heartbeat).  The
watermark is reported while the position moves and once a minute otherwise
(``watermark_period`` is set high here so that the test does not depend on the clock).
"""

from __future__ import annotations

import time


def _setup(pair):
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key)")
    pair.add_tables("public.t")
    worker = pair.worker(watermark_period="3600")
    pair.catch_up(worker)
    # After its last batch the worker asks once more, and then has nothing to do.
    while worker.work():
        pass
    return worker


def test_idle_loops_write_nothing_until_a_tick(pair) -> None:
    worker = _setup(pair)
    root_rows = pair.root("select xmin::text from ferry_queue.subscription order by sub_id")
    leaf_rows = pair.leaf("select xmin::text, last_seen from ferry_node.local_state")
    for _ in range(20):
        assert worker.work() is False
        time.sleep(0.02)
    assert pair.root("select xmin::text from ferry_queue.subscription order by sub_id") == root_rows
    assert pair.leaf("select xmin::text, last_seen from ferry_node.local_state") == leaf_rows
    # A tick is announced by a notification: the next loops take and apply its batch.
    pair.root("insert into t values (1)")
    tick = pair.tick()
    deadline = time.monotonic() + 30
    while pair.last_tick() != tick:
        assert time.monotonic() < deadline, "the tick was not applied"
        worker.work()
        time.sleep(0.02)
    assert pair.leaf("select id from t") == [(1,)]


def test_a_pause_is_confirmed_at_once(pair) -> None:
    worker = _setup(pair)
    for _ in range(3):
        worker.work()
    # What `pause` does: the flag, which clears uptodate (sql/node/010_pause.sql); the
    # worker's next write sets it again, and `pause --wait` waits for that.
    pair.leaf("update ferry_node.local_state set paused = true")
    assert pair.leaf("select uptodate from ferry_node.local_state") == [(False,)]
    deadline = time.monotonic() + 10
    while pair.leaf("select uptodate from ferry_node.local_state") != [(True,)]:
        assert time.monotonic() < deadline, "the pause was not confirmed"
        worker.work()
        time.sleep(0.02)
