"""The worker honours pgq_keep_lag (a delayed replica) and pgq_batch_collect_interval."""

from __future__ import annotations

import time

import pytest


@pytest.mark.timing
def test_keep_lag_delays_replay(make_pair) -> None:
    pair = make_pair(pgq_keep_lag="2s")
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key)")
    pair.add_tables("public.t")
    worker = pair.catch_up()
    pair.root("insert into t values (1)")
    made = time.monotonic()
    tick = pair.tick()
    while pair.last_tick() != tick:
        worker.work()
        if time.monotonic() - made < 1.5:
            # The tick is younger than pgq_keep_lag: nothing is applied yet.
            assert pair.leaf("select count(*) from t") == [(0,)]
        assert time.monotonic() - made < 30, "never applied"
        time.sleep(0.05)
    assert time.monotonic() - made >= 2.0
    assert pair.leaf("select id from t") == [(1,)]


def test_collect_interval_gathers_ticks(pair) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key)")
    pair.add_tables("public.t")
    pair.catch_up()
    worker = pair.worker(pgq_batch_collect_interval="1s")
    applied = []
    worker.batch_observers.append(lambda batch, stats, seconds: applied.append(batch))
    deadline = time.monotonic() + 30
    n = 0
    # A tick every 0.2 s (as a ticker makes them), a row every other tick.
    while pair.leaf("select count(*) from t") != [(6,)]:
        assert time.monotonic() < deadline, "rows did not arrive"
        if n < 6:
            pair.root("insert into t values (%s)", (n,))
            n += 1
        pair.tick()
        worker.work()
        time.sleep(0.2)
    assert applied
    # Each batch closes at the first tick at least 1 s after the batch's first tick,
    # though ticks came every 0.2-0.6 s: more than one tick per batch.
    spans = [(b.tick_time - b.prev_tick_time).total_seconds() for b in applied]
    assert all(span >= 1.0 for span in spans), spans
    assert all(b.tick_id - (b.prev_tick_id or 0) >= 2 for b in applied)


@pytest.mark.timing
def test_idle_worker_wakes_on_a_tick(pair) -> None:
    import threading

    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key)")
    pair.add_tables("public.t")
    worker = pair.catch_up()
    worker.sleep(0.1)  # the ticks of the catch-up announced themselves: forgotten here
    started = time.monotonic()
    worker.sleep(0.5)  # nothing happens: the whole delay
    assert time.monotonic() - started >= 0.45

    def tick_soon() -> None:
        time.sleep(0.3)
        pair.root("insert into t values (1)")
        pair.tick()

    thread = threading.Thread(target=tick_soon)
    started = time.monotonic()
    thread.start()
    worker.sleep(20)  # woken by the tick's notification, long before the delay is over
    woke = time.monotonic() - started
    thread.join()
    assert 0.25 <= woke < 5, woke
    worker.work()
    assert pair.leaf("select id from t") == [(1,)]
