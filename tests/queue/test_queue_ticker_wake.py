"""A sleeping ticker is woken by the first captured write (``ferry_queue.wake_ticker``).

While its next round is more than a busy period away the ticker holds an advisory lock
(``ferry_queue.ticker_asleep()``); a capture trigger that cannot get it in shared mode
notifies the ticker's channel, once per transaction.  Without the sleeping lock nobody
notifies: writers under a steady load never take the notification lock at commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from queue_helpers import Scalar, create_queue, install_queue, take_batch

from pgferry.polling import wait_until
from pgferry.queue.batches import TICKER_WAKE_CHANNEL
from pgferry.queue.ticker import TickerService, TickerSettings
from pgferry.testing.cluster import LocalCluster

SLEEP_LOCK = "select pg_advisory_lock(k1, k2) from ferry_queue.ticker_asleep()"


@pytest.fixture
def captured(qconn: psycopg.Connection, scalar: Scalar) -> psycopg.Connection:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    qconn.execute("create table public.t (id int primary key, v text)")
    scalar("select ferry_queue.attach_capture('q', 'public.t')")
    return qconn


def _wakes(listener: psycopg.Connection) -> int:
    """Notifications on the ticker's channel received so far (polled briefly)."""
    return sum(1 for n in listener.notifies(timeout=0.3) if n.channel == TICKER_WAKE_CHANNEL)


def test_a_write_wakes_a_sleeping_ticker_once_per_transaction(captured, qdb: str) -> None:
    with psycopg.connect(qdb, autocommit=True) as ticker:
        ticker.execute(f"listen {TICKER_WAKE_CHANNEL}")
        # Awake (no lock held): writers stay silent.
        captured.execute("insert into t select g, 'a' from generate_series(1, 5) g")
        assert _wakes(ticker) == 0
        ticker.execute(SLEEP_LOCK)  # asleep
        with captured.transaction():  # many rows, one transaction: one notification
            captured.execute("insert into t select g, 'b' from generate_series(6, 500) g")
            captured.execute("update t set v = 'c' where id <= 3")
        assert _wakes(ticker) == 1
        captured.execute("delete from t where id = 1")  # each transaction wakes it
        assert _wakes(ticker) == 1
        # A writer in flight holds the lock shared: the ticker cannot go to sleep.
        ticker.execute("select pg_advisory_unlock(k1, k2) from ferry_queue.ticker_asleep()")
        with captured.transaction():
            captured.execute("insert into t values (1000, 'd')")
            row = ticker.execute(
                "select pg_try_advisory_lock(k1, k2) from ferry_queue.ticker_asleep()"
            ).fetchone()
            assert row == (False,)
        assert _wakes(ticker) == 0
    # Every event arrived as without the wake-up.
    tick = captured.execute("select ferry_queue.force_tick('q'), ferry_queue.ticker('q')")
    assert tick.fetchone() is not None
    events = take_batch(captured, "q", "c") or []
    assert len(events) == 5 + 495 + 3 + 1 + 1


def test_a_ticker_that_reads_nothing_never_fails_a_writer(captured, qdb: str) -> None:
    # A hung ticker (its session holds the lock, its client reads nothing): writers commit.
    with psycopg.connect(qdb, autocommit=True) as hung:
        hung.execute(f"listen {TICKER_WAKE_CHANNEL}")
        hung.execute(SLEEP_LOCK)
        for n in range(200):
            captured.execute("insert into t values (%s, 'x')", (n,))
        assert captured.execute("select count(*) from t").fetchone() == (200,)


@pytest.fixture
def sleepy_ticker(pg_a: LocalCluster, tmp_path: Path) -> Iterator[str]:
    """A queue 'q' with consumer 'c' and a captured table, its ticker running with idle
    rounds a minute apart and no recent rounds: a tick within seconds of a write can only
    come from the wake-up."""
    name = f"wake_{int(time.time() * 1000) % 10**9}"
    db = install_queue(pg_a.createdb(name))
    with psycopg.connect(db, autocommit=True) as conn:
        create_queue(conn, ticker_idle_period="1 hour")
        conn.execute("select ferry_queue.register_consumer('q', 'c')")
        conn.execute("create table public.t (id int primary key, v text)")
        conn.execute("select ferry_queue.attach_capture('q', 'public.t')")
    settings = TickerSettings(
        base_connstr=f"host=127.0.0.1 port={pg_a.port} user=postgres",
        database_list=[name],
        ticker_period=60.0,
        ticker_recent_time=0.0,
        maint_period=600.0,
        retry_period=600.0,
    )
    service = TickerService(settings)
    thread = threading.Thread(target=service.run_forever, daemon=True)
    thread.start()
    try:
        yield db
    finally:
        service.stopping = True  # noticed within 0.1 s (no signal pipe in a thread)
        thread.join(timeout=30)
        assert not thread.is_alive()


def _sleeping(db: str) -> bool:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "select exists (select 1 from pg_locks l, ferry_queue.ticker_asleep() k"
            " where l.locktype = 'advisory' and l.granted and l.mode = 'ExclusiveLock'"
            " and l.classid::bigint = k.k1::bigint & 4294967295"
            " and l.objid::bigint = k.k2::bigint & 4294967295)"
        ).fetchone()
    return bool(row and row[0])


def test_the_first_write_after_a_quiet_spell_gets_its_tick_at_once(sleepy_ticker: str) -> None:
    db = sleepy_ticker
    wait_until(lambda: _sleeping(db), timeout=30, what="the ticker asleep")
    with psycopg.connect(db, autocommit=True) as conn:
        mark = conn.execute("select max(tick_id) from ferry_queue.tick").fetchone()
        conn.execute("insert into t values (1, 'a')")
        # The next idle round is a minute away: only the wake-up ticks this soon.
        wait_until(
            lambda: conn.execute("select max(tick_id) from ferry_queue.tick").fetchone() != mark,
            timeout=20,
            what="the write's tick",
        )
        events = take_batch(conn, "q", "c") or []
        assert [e[5] for e in events] == ['{"id":1,"v":"a"}']
    # Busy now (rounds every busy period for a ticker_period): the lock is released, so
    # the writers that follow take no notification lock at commit.
    wait_until(lambda: not _sleeping(db), timeout=10, what="the ticker awake")
