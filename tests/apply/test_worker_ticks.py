"""A worker whose batch took the only tick waiting wakes the ticker with its finish (a
notification on the ticker's channel, in the finish's round trip); the tick stays the
ticker's to make, so a stopped ticker still shows (events waiting, no tick)."""

from __future__ import annotations

import psycopg

from pgferry.queue.batches import TICKER_WAKE_CHANNEL
from pgferry.testing.cascade import sql_rows

DDL = "create table public.t (id int primary key, v text)"


def _ticks(dsn: str) -> int:
    return sql_rows(dsn, "select count(*) from ferry_queue.tick")[0][0]


def _woken(conn: psycopg.Connection) -> int:
    """Notifications on the ticker's channel received so far (without waiting)."""
    return sum(1 for n in conn.notifies(timeout=0.5) if n.channel == TICKER_WAKE_CHANNEL)


def test_the_finish_wakes_the_ticker_and_makes_no_tick(make_cascade, db_a, db_b) -> None:
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
    with psycopg.connect(db_a, autocommit=True) as listener:
        listener.execute(f"listen {TICKER_WAKE_CHANNEL}")
        sql_rows(db_a, "insert into t select g, 'a' from generate_series(1, 10) g")
        target = c.tick()
        # Written after the tick: they wait for the next one when the batch is finished.
        sql_rows(db_a, "insert into t values (11, 'b')")
        _woken(listener)  # the test's own force_tick
        ticks = _ticks(db_a)
        # The batch took the only tick: the worker waits for the next tick's notification.
        assert worker.work() is False
        assert c.last_tick("leaf") == target
        assert _woken(listener) == 1
        assert _ticks(db_a) == ticks  # no ticker runs here: nobody ticked
    c.tick()
    while worker.work():
        pass
    assert sql_rows(db_b, "select * from t order by id") == sql_rows(
        db_a, "select * from t order by id"
    )
