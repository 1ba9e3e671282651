"""The ticker daemon as a real process: -d, ticks, maintenance, retry, lost databases, -r, -s."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from queue_helpers import create_queue, install_queue, take_batch

from pgferry.config import load_config
from pgferry.queue import batches as queue_batches
from pgferry.queue.ticker import DatabaseState, TickerService, TickerSettings
from pgferry.testing.cluster import LocalCluster
from pgferry.testing.commands import run_pgferry
from pgferry.testing.scenario import wait_until


def wait_for(check: Callable[[], object], timeout: float = 30, what: str = "condition") -> object:
    """:func:`pgferry.testing.scenario.wait_until`, any database error counting as "not yet"
    (a database dropped or renamed under the ticker)."""

    def safe() -> object:
        try:
            return check()
        except psycopg.Error:
            return None

    return wait_until(safe, timeout, what)


def pgferry(*args: object) -> subprocess.CompletedProcess:
    return run_pgferry(*args, timeout=60)


def query(connstr: str, text: str, *params: object) -> object:
    with psycopg.connect(connstr, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(text, params or None).fetchone()  # type: ignore[arg-type]
        return None if row is None else row[0]


def make_queue_db(cluster: LocalCluster, name: str) -> str:
    connstr = install_queue(cluster.createdb(name))
    with psycopg.connect(connstr, autocommit=True) as conn:
        # Busy-queue cadence so that the daemon ticks within a test's patience.
        create_queue(conn, ticker_max_lag="0.1 s", ticker_idle_period="0.2 s", rotation_period="0")
    return connstr


def last_tick(connstr: str) -> int:
    value = query(connstr, "select last_tick_id from ferry_queue.get_queue_info('q')")
    return int(value)  # type: ignore[arg-type]


def write_ticker_ini(tmp_path: Path, cluster: LocalCluster, **extra: str) -> Path:
    ini = tmp_path / "pgqd.ini"
    settings = {
        "base_connstr": f"host=127.0.0.1 port={cluster.port} user=postgres",
        "initial_database": "postgres",
        "logfile": str(tmp_path / "log" / "%(job_name)s.log"),
        "pidfile": str(tmp_path / "pid" / "%(job_name)s.pid"),
        "ticker_period": "0.1",
        "maint_period": "0.3",
        "retry_period": "0.3",
        "check_period": "0.5",
        **extra,
    }
    ini.write_text("[pgqd]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
    return ini


@pytest.mark.slow
def test_daemon_lifecycle(pg_a: LocalCluster, tmp_path: Path) -> None:
    tag = f"tk{os.getpid()}"
    db1 = make_queue_db(pg_a, f"{tag}_one")
    db2 = make_queue_db(pg_a, f"{tag}_two")
    plain = pg_a.createdb(f"{tag}_plain")  # no queue schema: must simply be skipped
    ini = write_ticker_ini(
        tmp_path, pg_a, database_list=f"{tag}_one, {tag}_two, {tag}_plain, {tag}_missing"
    )
    pidfile = tmp_path / "pid" / "pgqd.pid"
    logfile = tmp_path / "log" / "pgqd.log"
    with psycopg.connect(db1, autocommit=True) as conn:
        conn.execute("select ferry_queue.register_consumer('q', 'c')")
        ev = conn.execute("select ferry_queue.insert_event('q', 't', 'd')").fetchone()[0]  # type: ignore[index]

    started = pgferry("-d", ini, "ticker")
    assert started.returncode == 0, started.stderr
    try:
        pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="pid"))  # type: ignore[arg-type]
        first1, first2 = last_tick(db1), last_tick(db2)
        wait_for(lambda: last_tick(db1) > first1 + 2 and last_tick(db2) > first2 + 2, what="ticks")
        assert query(plain, "select 1") == 1

        # Retry events are moved back into the queue by the daemon.
        with psycopg.connect(db1, autocommit=True) as conn:
            batch = wait_for(
                lambda: conn.execute("select ferry_queue.next_batch('q', 'c')").fetchone()[0],  # type: ignore[index]
                what="batch",
            )
            conn.execute("select ferry_queue.event_retry(%s, %s, 0)", (batch, ev))
            conn.execute("select ferry_queue.finish_batch(%s)", (batch,))
        wait_for(
            lambda: query(db1, "select count(*) from ferry_queue.retry_queue") == 0, what="retry"
        )

        # Maintenance rotates the tables (rotation_period 0, the consumer keeps up).
        def rotated() -> bool:
            with psycopg.connect(db1, autocommit=True) as conn:
                while (
                    b := conn.execute("select ferry_queue.next_batch('q', 'c')").fetchone()[0]
                ) is not None:  # type: ignore[index]
                    conn.execute("select ferry_queue.finish_batch(%s)", (b,))
            return bool(query(db1, "select queue_cur_table <> 0 from ferry_queue.queue"))

        wait_for(rotated, what="rotation")

        # A database that goes away and comes back.
        with psycopg.connect(pg_a.connstr(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("drop database {} with (force)").format(sql.Identifier(f"{tag}_two"))
            )
        mark = last_tick(db1)
        wait_for(lambda: last_tick(db1) > mark + 2, what="ticks on the surviving database")
        make_queue_db(pg_a, f"{tag}_two")
        wait_for(lambda: last_tick(db2) > 3, what="ticks on the returned database")

        # -r: reload the config; still ticking afterwards.
        assert "SIGHUP" in pgferry("-r", ini, "ticker").stdout
        wait_for(lambda: "Reloading config" in logfile.read_text(), what="reload")
        mark = last_tick(db1)
        wait_for(lambda: last_tick(db1) > mark, what="ticks after reload")

        # A second instance is refused while the first runs.
        second = pgferry("-d", ini, "ticker")
        assert second.returncode != 0 and "another process running" in second.stderr
    finally:
        stopped = pgferry("-s", ini, "ticker")
    assert stopped.returncode == 0
    wait_for(lambda: not pidfile.exists(), what="pidfile removal")
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what="process exit")
    log = logfile.read_text()
    assert f"{tag}_one: ticking" in log and f"{tag}_missing" in log
    assert "password" not in log


def test_discovery_lists_databases(pg_a: LocalCluster, tmp_path: Path) -> None:
    name = f"disc_{os.getpid()}"
    pg_a.createdb(name)
    ini = write_ticker_ini(tmp_path, pg_a)
    service = TickerService(TickerSettings.from_config(load_config(ini, ("pgqd",))))
    assert name in service.discover()


def test_discovery_uses_a_held_connection(pg_a: LocalCluster, tmp_path: Path) -> None:
    # pg_database is shared: once a database is served, its connection lists the others
    # and initial_database is not connected to again.
    name = f"held_{os.getpid()}"
    install_queue(pg_a.createdb(name))
    ini = write_ticker_ini(tmp_path, pg_a, initial_database="no_such_database")
    service = TickerService(TickerSettings.from_config(load_config(ini, ("pgqd",))))
    with pytest.raises(Exception, match="no_such_database"):
        service.discover()
    db = service.databases[name] = DatabaseState(name)
    try:
        assert service._open(db, time.monotonic())
        assert name in service.discover()
    finally:
        db.close()


def test_bad_ticker_config_is_one_line(tmp_path: Path, pg_a: LocalCluster) -> None:
    missing = pgferry(tmp_path / "nope.ini", "ticker")
    assert missing.returncode != 0 and "config file not found" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    ini = write_ticker_ini(tmp_path, pg_a, base_connstr="dbname=x")
    bad = pgferry(ini, "ticker")
    assert bad.returncode != 0 and "must not contain dbname" in bad.stderr
    ini = write_ticker_ini(tmp_path, pg_a, ticker_period="fast")
    bad = pgferry(ini, "ticker")
    assert bad.returncode != 0 and "ticker_period" in bad.stderr
    assert "Traceback" not in bad.stderr


# --- cadence: a tick soon after events wait, nothing while idle ----------------------------


def _cadence_db(cluster: LocalCluster, name: str, idle_period: str) -> str:
    """A queue with the default tick rules (max_lag 50 ms), only its idle period set."""
    connstr = install_queue(cluster.createdb(name))
    with psycopg.connect(connstr, autocommit=True) as conn:
        conn.execute("select ferry_queue.create_queue('q')")
        conn.execute(
            "select ferry_queue.set_queue_config('q', 'ticker_idle_period', %s)", (idle_period,)
        )
    return connstr


def _run_ticker(
    tmp_path: Path, cluster: LocalCluster, db: str, **settings: str
) -> Callable[[], None]:
    ini = write_ticker_ini(tmp_path, cluster, database_list=db, **settings)
    started = pgferry("-d", ini, "ticker")
    assert started.returncode == 0, started.stderr
    log = tmp_path / "log" / "pgqd.log"
    wait_for(lambda: log.exists() and f"{db}: ticking" in log.read_text(), what="ticking")

    def stop() -> None:
        assert pgferry("-s", ini, "ticker").returncode == 0
        pidfile = tmp_path / "pid" / "pgqd.pid"
        wait_for(lambda: not pidfile.exists(), what="ticker exit")

    return stop


@pytest.mark.timing
def test_busy_queue_ticks_every_busy_period(pg_a: LocalCluster, tmp_path: Path) -> None:
    # An idle round only every 30 s: the ticks below can only come from the busy cadence.
    name = f"busy_{os.getpid()}"
    db = _cadence_db(pg_a, name, "1 hour")
    stop = _run_ticker(tmp_path, pg_a, name, ticker_period="30", ticker_busy_period="0.05")
    try:
        first = last_tick(db)
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("select ferry_queue.insert_event('q', 't', 'd')")
            # The daemon's first round ran before this event; force_tick wakes it.
            conn.execute("select ferry_queue.force_tick('q')")
            wait_for(lambda: last_tick(db) > first, timeout=10, what="the forced tick")
            mark = last_tick(db)

            def busy_ticks() -> bool:
                conn.execute("select ferry_queue.insert_event('q', 't', 'd')")
                return last_tick(db) >= mark + 20

            # An event every 50 ms or so: at least 20 ticks within 10 s (one a round).
            wait_for(busy_ticks, timeout=10, what="20 ticks of a busy queue")
    finally:
        stop()


def test_idle_rounds_write_nothing(pg_a: LocalCluster, tmp_path: Path) -> None:
    name = f"idle_{os.getpid()}"
    db = _cadence_db(pg_a, name, "1 hour")
    ticks = query(db, "select count(*) from ferry_queue.tick")
    locker = query(db, "select xmax::text from ferry_queue.queue")
    stop = _run_ticker(tmp_path, pg_a, name, ticker_period="0.1")
    try:
        commits = query(db, "select xact_commit from pg_stat_database where datname = %s", name)

        def rounds_done() -> bool:
            query(db, "select pg_stat_clear_snapshot()")
            now = query(db, "select xact_commit from pg_stat_database where datname = %s", name)
            return int(now) >= int(commits) + 20  # type: ignore[arg-type]

        wait_for(rounds_done, timeout=60, what="20 ticker rounds")
        assert query(db, "select count(*) from ferry_queue.tick") == ticks
        # Never locked: a locking round would have left its transaction id on the row.
        assert query(db, "select xmax::text from ferry_queue.queue") == locker
    finally:
        stop()


@pytest.mark.timing
def test_idle_daemon_ticks_new_and_late_events(pg_a: LocalCluster, tmp_path: Path) -> None:
    # Idle rounds are one query and skip a settled late-commit check (queue version 12):
    # a new event and a late commit must still get their tick within a ticker_period.
    name = f"late_{os.getpid()}"
    db = _cadence_db(pg_a, name, "1 hour")
    query(db, "select ferry_queue.register_consumer('q', 'c')")
    stop = _run_ticker(tmp_path, pg_a, name, ticker_period="0.5")

    def commits() -> int:
        # Read from another database, so that this read is not one of the counted commits.
        return int(
            query(  # type: ignore[arg-type]
                pg_a.connstr(), "select xact_commit from pg_stat_database where datname = %s", name
            )
        )

    def idle_rounds(count: int) -> None:
        start = commits()
        wait_for(lambda: commits() >= start + count, timeout=30, what=f"{count} ticker rounds")

    def tick_delay(mark: int) -> float:
        start = time.monotonic()
        wait_for(lambda: last_tick(db) > mark, timeout=30, what="a tick")
        return time.monotonic() - start

    try:
        idle_rounds(6)  # time to settle the check of the last tick
        mark = last_tick(db)
        query(db, "select ferry_queue.insert_event('q', 't', 'new')")
        assert tick_delay(mark) < 1.5  # ticker_period 0.5 s, with room for a busy machine

        with psycopg.connect(db) as writer:
            writer.execute("select ferry_queue.insert_event('q', 't', 'late')")
            mark = last_tick(db)
            query(db, "select ferry_queue.force_tick('q')")  # a tick while the writer runs
            wait_for(lambda: last_tick(db) > mark, what="the forced tick")
            idle_rounds(6)
            mark = last_tick(db)
            writer.commit()
        assert tick_delay(mark) < 1.5
        assert last_tick(db) == mark + 1  # one tick for the late commit, no more
        with psycopg.connect(db, autocommit=True) as conn:
            events = []
            while (batch := take_batch(conn, "q", "c")) is not None:
                events += [row[5] for row in batch]
        assert events == ["new", "late"]
    finally:
        stop()


# --- while active: a tick within milliseconds of an event; backs off once idle ------------


def _commits(cluster: LocalCluster, name: str) -> int:
    # Read from another database, so that this read is not one of the counted commits.
    return int(
        query(  # type: ignore[arg-type]
            cluster.connstr(), "select xact_commit from pg_stat_database where datname = %s", name
        )
    )


NEWEST_TICK = "select max(tick_id) from ferry_queue.tick"


def _waiting_consumer_db(cluster: LocalCluster, name: str) -> str:
    """A queue 'q' whose ticks come only for its consumer 'c' waiting (max_lag an hour)."""
    db = _cadence_db(cluster, name, "1 hour")
    query(db, "select ferry_queue.set_queue_config('q', 'ticker_max_lag', '1 hour')")
    query(db, "select ferry_queue.register_consumer('q', 'c')")
    return db


def _next_tick_after_a_write(conn: psycopg.Connection) -> float:
    """Seconds from an event written on queue 'q' to the next tick (polled)."""
    mark = conn.execute(NEWEST_TICK).fetchone()
    conn.execute("select ferry_queue.insert_event('q', 't', 'd')")
    start = time.monotonic()
    while conn.execute(NEWEST_TICK).fetchone() == mark:
        assert time.monotonic() - start < 5, "no tick for a waiting consumer"
    return time.monotonic() - start


def _next_batch(conn: psycopg.Connection) -> int | None:
    row = conn.execute("select ferry_queue.next_batch('q', 'c')").fetchone()
    return row[0] if row else None


@pytest.mark.timing
def test_active_ticker_ticks_soon_for_a_waiting_consumer(
    pg_a: LocalCluster, tmp_path: Path
) -> None:
    # max_lag an hour and idle rounds every 30 s: only the busy rounds (default period) and
    # the waiting consumer can tick.
    name = f"soon_{os.getpid()}"
    db = _waiting_consumer_db(pg_a, name)
    stop = _run_ticker(tmp_path, pg_a, name, ticker_period="30")
    try:
        delays = []
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("select ferry_queue.insert_event('q', 't', 'd')")
            mark = last_tick(db)
            conn.execute("select ferry_queue.force_tick('q')")  # wakes it: active from now
            wait_for(lambda: last_tick(db) > mark, timeout=10, what="the forced tick")
            for _ in range(20):
                # Finished as the worker finishes a batch: with the ticker's wake-up (a
                # consumer that does not wake it waits up to ticker_recent_period).
                while (batch := _next_batch(conn)) is not None:
                    queue_batches.finish_batch_and_wake(conn, batch)
                delays.append(_next_tick_after_a_write(conn))
        delays.sort()
        assert delays[len(delays) // 2] < 0.03, delays  # ticker_busy_period: 5 ms
    finally:
        stop()


def test_active_ticker_backs_off_when_idle(pg_a: LocalCluster, tmp_path: Path) -> None:
    # Busy rounds (every 5 ms) last one ticker_period after events were seen; then one
    # round a ticker_period (the recent rounds turned off here; see the test below).
    # Counted, not timed: a slow machine only makes fewer rounds.
    name = f"backoff_{os.getpid()}"
    db = _cadence_db(pg_a, name, "1 hour")
    stop = _run_ticker(
        tmp_path,
        pg_a,
        name,
        ticker_period="0.5",
        ticker_recent_time="0",
        maint_period="60",
        retry_period="60",
    )
    try:
        mark = last_tick(db)
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("select ferry_queue.insert_event('q', 't', 'd')")
            conn.execute("select ferry_queue.force_tick('q')")
        wait_for(lambda: last_tick(db) > mark, timeout=10, what="the forced tick")
        start = _commits(pg_a, name)
        time.sleep(1.0)  # a measured window while busy: rounds every 5 ms (up to 0.5 s)
        busy = _commits(pg_a, name) - start
        time.sleep(1.0)  # past the busy period
        start = _commits(pg_a, name)
        time.sleep(2.0)  # a measured idle window: about 4 rounds
        idle = _commits(pg_a, name) - start
        assert idle <= 8, (busy, idle)
        assert busy > idle, (busy, idle)
    finally:
        stop()


@pytest.mark.timing
def test_a_write_after_a_pause_gets_its_tick_within_the_recent_period(
    pg_a: LocalCluster, tmp_path: Path
) -> None:
    # ticker_period 2 s: after the busy rounds end, a write waits up to 2 s for the next
    # round, unless the recent rounds (every 50 ms for 20 s after the last events) come.
    name = f"recent_{os.getpid()}"
    db = _waiting_consumer_db(pg_a, name)
    stop = _run_ticker(
        tmp_path, pg_a, name, ticker_period="2", ticker_recent_period="0.05",
        ticker_recent_time="20", maint_period="60", retry_period="60",
    )  # fmt: skip
    try:
        delays = []
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("select ferry_queue.insert_event('q', 't', 'd')")
            mark = last_tick(db)
            conn.execute("select ferry_queue.force_tick('q')")  # active from now
            wait_for(lambda: last_tick(db) > mark, timeout=10, what="the forced tick")
            for _ in range(3):
                while take_batch(conn, "q", "c") is not None:
                    pass
                time.sleep(2.5)  # past the busy rounds (one ticker_period after events)
                delays.append(_next_tick_after_a_write(conn))
        delays.sort()
        assert delays[1] < 0.5, delays  # the median: a recent round, not the 2 s one
    finally:
        stop()


def test_busy_rounds_wait_longer_while_the_consumer_works(
    pg_a: LocalCluster, tmp_path: Path
) -> None:
    # While a consumer holds its batch and events keep coming, no round can tick before it
    # finishes (a worker then wakes the ticker) or max_lag (an hour here): each round waits
    # twice as long as the one before, up to ticker_recent_period, without the sleeping lock
    # (every writer would notify).  Once no event waits, ticker_busy_period again.  The
    # rounds are run by hand at chosen instants: the periods are exact, not timed.
    name = f"step_{os.getpid()}"
    db = _waiting_consumer_db(pg_a, name)
    ini = write_ticker_ini(
        tmp_path, pg_a, database_list=name, ticker_period="30", ticker_busy_period="0.005",
        ticker_recent_period="0.05", maint_period="600", retry_period="600",
    )  # fmt: skip
    service = TickerService(TickerSettings.from_config(load_config(ini, ("pgqd",))))
    state = service.databases[name] = DatabaseState(name)
    now = time.monotonic()

    def round_period() -> float:
        nonlocal now
        now = state.next_tick
        service.serve(state, now)
        assert state.last_error is None, state.last_error
        return round(state.next_tick - now, 6)

    try:
        service.serve(state, now)  # connects; the queue's first round
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("select ferry_queue.insert_event('q', 't', 'd')")
            mark = last_tick(db)
            assert round_period() == 0.005  # the waiting consumer's tick
            assert last_tick(db) == mark + 1
            batch = conn.execute("select ferry_queue.next_batch('q', 'c')").fetchone()[0]
            assert batch is not None
            conn.execute("select ferry_queue.insert_event('q', 't', 'd')")
            periods = [round_period() for _ in range(6)]
            assert periods == [0.01, 0.02, 0.04, 0.05, 0.05, 0.05], periods
            assert last_tick(db) == mark + 1  # the consumer is at work: no tick
            assert not state.asleep
            conn.execute("select ferry_queue.finish_batch(%s)", (batch,))
            round_period()  # the consumer waits: its tick
            assert last_tick(db) == mark + 2
            while take_batch(conn, "q", "c") is not None:
                pass
            assert round_period() == 0.005  # nothing waits: look soon for the next write
            assert not state.asleep
    finally:
        state.close()


def test_a_broken_connection_is_opened_again_at_the_next_round(
    pg_a: LocalCluster, tmp_path: Path
) -> None:
    # A failover behind a multi-host connect string breaks the serving connection while the
    # new primary may be up already: the next round connects, without the error delay.  A
    # connection that cannot be made still waits the delay.
    name = f"lost_{os.getpid()}"
    make_queue_db(pg_a, name)
    ini = write_ticker_ini(tmp_path, pg_a, database_list=name, check_period="60")
    service = TickerService(TickerSettings.from_config(load_config(ini, ("pgqd",))))
    try:
        service.work()
        db = service.databases[name]
        assert db.conn is not None and db.last_error is None
        pid = db.conn.info.backend_pid
        query(pg_a.connstr(name), "select pg_terminate_backend(%s)", pid)
        service.work()  # meets the broken connection
        assert db.conn is None and db.last_error is not None
        service.work()  # the next round
        assert db.conn is not None and db.conn.info.backend_pid != pid
        assert db.last_error is None  # served on the new connection
        # A refused connection is tried again only after the delay.
        db.close()
        db.last_error = "refused"
        db.next_try = time.monotonic() + 60
        service.work()
        assert db.conn is None
    finally:
        service.shutdown()
