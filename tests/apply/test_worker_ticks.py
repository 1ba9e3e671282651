"""A worker whose batch took the only tick waiting makes the next tick itself when events
wait (in the finish's round trip), and goes on at once; a queue ticked from outside (a
branch's) refuses, and its subscriber only finishes batches."""

from __future__ import annotations

import psycopg

from pgferry.apply import positions
from pgferry.testing.cascade import sql_rows

DDL = "create table public.t (id int primary key, v text)"


def _ticks(dsn: str) -> int:
    return sql_rows(dsn, "select count(*) from ferry_queue.tick")[0][0]


def test_the_leaf_ticks_the_root_queue_after_its_batch(make_cascade, db_a, db_b) -> None:
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("leaf", db_b, "leaf", "root")
    for dsn in (db_a, db_b):
        sql_rows(dsn, DDL)
    c.add("root", "public.t")
    c.add("leaf", "public.t")
    c.catch_up("leaf")
    worker = c.worker("leaf")
    while worker.work():  # nothing left over from the copy's hand-over
        pass
    sql_rows(db_a, "insert into t select g, 'a' from generate_series(1, 10) g")
    target = c.tick()
    # Written after the tick: they wait for the next one when the batch is finished.
    sql_rows(db_a, "insert into t select g, 'b' from generate_series(11, 15) g")
    ticks = _ticks(db_a)
    assert worker.work() is True  # applied the tick's batch and made the next tick
    assert c.last_tick("leaf") == target
    assert _ticks(db_a) == ticks + 1
    # The new tick's batch, without the ticker; nothing waits after it: no tick is
    # made and the worker waits for one.
    assert worker.work() is False
    assert c.last_tick("leaf") == target + 1
    assert _ticks(db_a) == ticks + 1
    assert sql_rows(db_b, "select * from t order by id") == sql_rows(
        db_a, "select * from t order by id"
    )


def test_a_queue_ticked_from_outside_refuses_and_the_batch_is_finished(
    make_cascade, db_a, db_b, new_db_b
) -> None:
    db_c = new_db_b(None)
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("branch", db_b, "branch", "root")
    for dsn in (db_a, db_b, db_c):
        sql_rows(dsn, DDL)
    c.add("root", "public.t")
    c.add("branch", "public.t")
    c.catch_up("branch")
    queue = c.queue
    with psycopg.connect(db_b, autocommit=True) as branch:
        branch.execute("select ferry_queue.register_consumer(%s, 'probe_consumer')", (queue,))
        sql_rows(db_a, "insert into t values (1, 'x')")
        c.catch_up("branch")  # the branch mirrors a tick of the root: a batch to take
        batch_id = branch.execute(
            "select ferry_queue.next_batch(%s, 'probe_consumer')", (queue,)
        ).fetchone()[0]
        assert batch_id is not None
        assert positions.finish_and_tick(branch, batch_id, queue, tick=True) is False
        row = branch.execute(
            "select sub_batch from ferry_queue.subscription where sub_consumer = 'probe_consumer'"
        ).fetchone()
        assert row == (None,)  # finished all the same
        # Remembered for this connection: the next finish does not try again.
        assert branch in positions._NO_TICKS
