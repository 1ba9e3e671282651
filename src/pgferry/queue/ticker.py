"""The ticker daemon (pgqd's job): ticks, rotation and retry for every queue database.

One :class:`TickerService` watches a whole PostgreSQL cluster.  It lists the databases
through a connection it holds, else ``initial_database`` (or takes ``database_list``), and
for each one that has the ``ferry_queue`` schema it calls ``ferry_queue.ticker_round()``
every ``ticker_period``, or every ``ticker_busy_period`` while events wait for a tick and
for a ``ticker_period`` after (so an event gets its tick within about that time; while the
consumers are at work on their batches and events keep coming, each round waits twice as
long as the one before, up to ``ticker_recent_period``: a worker that finishes wakes the
ticker, and nothing else can be due before ``max_lag``), then every
``ticker_recent_period`` until ``ticker_recent_time`` has passed since events were last
seen (a writer that pauses for a few seconds gets its tick within that, not within a
``ticker_period``). It runs the maintenance operations (``ferry_queue.maint_operations()``:
rotation steps and hooks) every ``maint_period`` and moves due retry events back every
``retry_period``. ``force_tick`` wakes it at once (a notification), and so does the first
captured write after a quiet spell: while its next round is more than a
``ticker_busy_period`` away (and no events have waited for a ``ticker_period``) it holds an
advisory lock (``ferry_queue.ticker_asleep()``) that capture triggers try, and a trigger
that cannot get it notifies (``ferry_queue.wake_ticker``). Between its timers it blocks on
its connections and a signal pipe, using no CPU; an idle round is one prepared statement
run through libpq, and writes nothing.  A database that is missing, lacks the schema or
fails is retried later; one failing database never stops the others.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import psycopg
from psycopg import sql

from pgferry.daemon import Service
from pgferry.db import connect, error_text, run_prepared, server_of
from pgferry.queue.batches import TICKER_WAKE_CHANNEL
from pgferry.queue.ticker_settings import TickerSettings

log = logging.getLogger(__name__)

APPLICATION_NAME = "pgferry ticker"
# After an SQL error on a database, wait this long before reconnecting (as pgqd does),
# unless check_period is shorter.
ERROR_RETRY_DELAY = 10.0
# A retry/maint function returning non-zero is called again; this bounds one round.
MAX_REPEATS = 1000
# force_tick (ferry_queue.force_tick) and a worker that finished its batch notify this
# channel: the ticker runs its round at once.
WAKE_CHANNEL = TICKER_WAKE_CHANNEL
# Seconds a ticker session may stay idle before the server ends it (or ten ticker_periods).
IDLE_SESSION_TIMEOUT = 60.0
# The round, prepared once per connection and run through libpq (run_prepared).
ROUND_STATEMENT = b"ferry_ticker_round"


@dataclass
class DatabaseState:
    """Connection and timers of one watched database."""

    name: str
    conn: psycopg.Connection | None = None
    connected_at: float = 0.0
    next_try: float = 0.0
    next_tick: float = 0.0
    next_maint: float = 0.0
    next_retry: float = 0.0
    busy_until: float = 0.0  # rounds come every busy_step until then
    # The wait after a round that found events waiting: ticker_busy_period, doubled by
    # every such round up to busy_step_cap(); back to ticker_busy_period once none wait.
    busy_step: float = 0.0
    recent_until: float = 0.0  # then every ticker_recent_period until this
    # The schema has ticker_round() (queue version 10): rounds say whether events wait.
    has_round: bool = False
    # Its capture triggers wake a sleeping ticker (ferry_queue.wake_ticker), and whether
    # this session holds the lock that tells them it sleeps.
    wakes: bool = False
    asleep: bool = False
    notified: bool = False  # a force_tick notification came with a psycopg statement
    last_error: str | None = None
    # Totals since the database was first watched (the metrics' counters).
    ticks_made: int = 0
    maint_operations: int = 0
    retry_moved: int = 0
    errors: int = 0

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
        self.conn = None
        self.asleep = False  # the session's lock went with it


class TickerService(Service):
    """The daemon loop; :meth:`work` is one round over every watched database.

    ``reload_settings`` (called after SIGHUP) re-reads the config file.
    """

    exception_sleep = ERROR_RETRY_DELAY

    def __init__(
        self,
        settings: TickerSettings,
        reload_settings: Callable[[], TickerSettings] | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self._reload_settings = reload_settings
        self.databases: dict[str, DatabaseState] = {}
        self.next_check = 0.0
        self.next_stats = time.monotonic() + settings.stats_period
        self.stats = {"ticks": 0, "maint": 0, "retry": 0}

    # --- discovery -----------------------------------------------------------------------
    def discover(self) -> list[str]:
        if self.settings.database_list:
            return list(self.settings.database_list)
        # pg_database is shared by every database of the cluster: a connection the ticker
        # holds anyway lists them, instead of a new one to initial_database each check.
        for db in self.databases.values():
            if db.conn is not None and not db.conn.closed:
                with contextlib.suppress(psycopg.Error):  # lost: that round reconnects
                    return self._list_databases(db.conn)
        with connect(
            self.settings.connstr(self.settings.initial_database),
            autocommit=True,
            application_name=APPLICATION_NAME,
        ) as conn:
            return self._list_databases(conn)

    @staticmethod
    def _list_databases(conn: psycopg.Connection) -> list[str]:
        rows = conn.execute(
            "select datname from pg_database"
            " where not datistemplate and datallowconn order by datname"
        ).fetchall()
        return [row[0] for row in rows]

    def refresh_databases(self, now: float) -> None:
        try:
            names = self.discover()
        except Exception as exc:  # noqa: BLE001 - keep serving the known databases
            log.warning("cannot list databases: %s", error_text(exc))
            self.next_check = now + min(self.settings.check_period, ERROR_RETRY_DELAY)
            return
        self.next_check = now + self.settings.check_period
        for name in names:
            if name not in self.databases:
                log.debug("watching database %s", name)
                self.databases[name] = DatabaseState(name)
        for name in list(self.databases):
            if name not in names:
                log.info("database %s is gone, no longer watched", name)
                self.databases.pop(name).close()

    # --- per database --------------------------------------------------------------------
    def _open(self, db: DatabaseState, now: float) -> bool:
        """Connect when due; False when the database cannot be served now."""
        lifetime = self.settings.connection_lifetime
        if db.conn is not None and (db.conn.closed or now - db.connected_at > lifetime):
            db.close()
        if db.conn is not None:
            return True
        if now < db.next_try:
            return False
        conn = connect(
            self.settings.connstr(db.name), autocommit=True, application_name=APPLICATION_NAME
        )
        row = conn.execute(
            "select to_regprocedure('ferry_queue.ticker()') is not null,"
            " to_regprocedure('ferry_queue.ticker_round()') is not null,"
            " to_regprocedure('ferry_queue.wake_ticker()') is not null"
        ).fetchone()
        if not row or not row[0]:
            conn.close()
            db.next_try = now + self.settings.check_period
            log.debug("database %s has no ferry_queue, checking again later", db.name)
            return False
        conn.execute(sql.SQL("listen {}").format(sql.Identifier(WAKE_CHANNEL)))
        if row[2] and conn.info.server_version >= 140000:
            # A hung ticker holding the sleeping lock would make every writer notify (each
            # commit then takes the notification lock): the server ends such a session.  A
            # live one runs a round at least every ticker_period.
            timeout = int(max(IDLE_SESSION_TIMEOUT, 10 * self.settings.ticker_period) * 1000)
            conn.execute(sql.SQL("set idle_session_timeout = {}").format(sql.Literal(timeout)))
        if row[1]:
            conn.execute(
                f"prepare {ROUND_STATEMENT.decode()} as"
                " select ticks, waiting from ferry_queue.ticker_round()"
            )
        # Notifications that come with psycopg's statements (maint, retry) land here; those
        # of the round and of an idle wait stay in libpq's queue (_woken reads both).
        conn.add_notify_handler(lambda _: setattr(db, "notified", True))
        db.conn, db.connected_at, db.has_round = conn, now, bool(row[1])
        db.wakes = bool(row[1] and row[2])
        db.next_tick = db.next_maint = db.next_retry = now
        log.info("%s: ticking on %s", db.name, server_of(conn))
        return True

    def _maint(self, conn: psycopg.Connection) -> int:
        ops = conn.execute(
            "select func_name, func_arg from ferry_queue.maint_operations()"
        ).fetchall()
        count = 0
        for func_name, func_arg in ops:
            func = sql.Identifier(*func_name.split("."))
            if func_arg is None:
                query = sql.SQL("select {}()").format(func)
            else:
                query = sql.SQL("select {}({})").format(func, sql.Literal(func_arg))
            for _ in range(MAX_REPEATS):
                row = conn.execute(query).fetchone()
                count += 1
                if not row or not row[0]:
                    break
        return count

    def _retry(self, conn: psycopg.Connection) -> int:
        moved = 0
        for _ in range(MAX_REPEATS):
            row = conn.execute("select ferry_queue.maint_retry_events()").fetchone()
            if not row or not row[0]:
                break
            moved += row[0]
        return moved

    def serve(self, db: DatabaseState, now: float) -> None:
        serving = db.conn is not None and db.last_error is None
        try:
            if not self._open(db, now):
                return
            assert db.conn is not None
            if now >= db.next_tick:
                waiting = 0
                if db.has_round:
                    result = run_prepared(db.conn, ROUND_STATEMENT)
                    # Both columns are bigint, never null (ticker_round's result).
                    ticks = int(cast(bytes, result.get_value(0, 0)))
                    waiting = int(cast(bytes, result.get_value(0, 1)))
                else:
                    row = db.conn.execute("select ferry_queue.ticker()").fetchone()
                    ticks = row[0] if row and row[0] else 0
                self.stats["ticks"] += ticks
                db.ticks_made += ticks
                # While events wait, and for a ticker_period after, look again soon: their
                # tick is due within max_lag, and more events tend to follow.
                settings = self.settings
                if waiting:
                    db.busy_until = now + settings.ticker_period
                    db.recent_until = now + settings.ticker_recent_time
                busy = now < db.busy_until
                if not busy:
                    db.busy_step = settings.ticker_busy_period
                    # Past a quiet spell after writes: look more often than an idle queue
                    # is looked at, so that the next write waits less than a ticker_period.
                    period = (
                        min(settings.ticker_recent_period, settings.ticker_period)
                        if now < db.recent_until
                        else settings.ticker_period
                    )
                elif waiting:
                    # Events waiting after this round (ticked or not) have their consumers
                    # at work: a pgferry worker wakes the ticker when it finishes, and the
                    # rest is max_lag's tick.  Each such round waits twice as long as the
                    # one before, up to busy_step_cap().
                    period = max(db.busy_step, settings.ticker_busy_period)
                    db.busy_step = min(2 * period, self.busy_step_cap())
                else:
                    # None waits: look again soon, for the next write.
                    period = db.busy_step = settings.ticker_busy_period
                db.next_tick = now + period
                if db.wakes:
                    # Never while events flow: every writer would then notify.
                    self._sleep_lock(
                        db, now, asleep=not busy and period > settings.ticker_busy_period
                    )
            if now >= db.next_maint:
                operations = self._maint(db.conn)
                self.stats["maint"] += operations
                db.maint_operations += operations
                db.next_maint = now + self.settings.maint_period
            if now >= db.next_retry:
                moved = self._retry(db.conn)
                self.stats["retry"] += moved
                db.retry_moved += moved
                db.next_retry = now + self.settings.retry_period
            if db.last_error is not None:
                log.info("%s: working again", db.name)
                db.last_error = None
        except Exception as exc:  # noqa: BLE001 - one database must not stop the others
            message = error_text(exc)
            db.errors += 1
            if message != db.last_error:
                log.warning("%s: %s", db.name, message)
            db.last_error = message
            db.close()
            # A connection that broke while serving is opened again at the next round:
            # behind a multi-host connect string the new primary may be up already.
            delay = 0.0 if serving else min(ERROR_RETRY_DELAY, self.settings.check_period)
            db.next_try = now + delay

    def busy_step_cap(self) -> float:
        """The longest wait between rounds while events wait: ``ticker_recent_period``
        (within ``ticker_busy_period`` and ``ticker_period``)."""
        settings = self.settings
        return max(
            settings.ticker_busy_period,
            min(settings.ticker_recent_period, settings.ticker_period),
        )

    @staticmethod
    def _sleep_lock(db: DatabaseState, now: float, *, asleep: bool) -> None:
        """Hold the lock that tells capture triggers this ticker sleeps (they then wake it:
        ``ferry_queue.wake_ticker``) while its next round is more than a busy period away
        and events have stopped; release it once events flow.  A writer that holds it
        (shared, until its commit) keeps the ticker from taking it: the next round tries
        again."""
        assert db.conn is not None
        if asleep and not db.asleep:
            row = db.conn.execute(
                "select pg_try_advisory_lock(k1, k2) from ferry_queue.ticker_asleep()"
            ).fetchone()
            db.asleep = bool(row and row[0])
            if db.asleep:
                # A writer that committed before the lock was taken woke nobody.
                db.next_tick = now
        elif not asleep and db.asleep:
            db.conn.execute("select pg_advisory_unlock(k1, k2) from ferry_queue.ticker_asleep()")
            db.asleep = False

    # --- loop ----------------------------------------------------------------------------
    def work(self) -> bool:
        now = time.monotonic()
        if now >= self.next_check:
            self.refresh_databases(now)
        for db in list(self.databases.values()):
            self.serve(db, now)
        if now >= self.next_stats:
            log.info("{ticks: %(ticks)d, maint: %(maint)d, retry: %(retry)d}", self.stats)
            self.stats = dict.fromkeys(self.stats, 0)
            self.next_stats = now + self.settings.stats_period
        return False

    def reload(self) -> None:
        if self._reload_settings is None:
            return
        self.settings = self._reload_settings()
        self.next_check = 0.0  # database_list may have changed

    def shutdown(self) -> None:
        for db in self.databases.values():
            db.close()
        log.info("ticker stopped")

    def _next_due(self) -> float:
        """The earliest timer of any database or of the service itself."""
        due = min(self.next_check, self.next_stats)
        for db in self.databases.values():
            if db.conn is None:
                due = min(due, db.next_try)
            else:
                due = min(due, db.next_tick, db.next_maint, db.next_retry)
        return due

    def sleep(self, seconds: float) -> None:
        """Block until the next timer, a force_tick notification or a signal.

        ``seconds`` (the loop delay) only bounds the wait: the timers decide.
        """
        deadline = min(time.monotonic() + seconds, self._next_due())
        conns = {
            db.conn.pgconn.socket: db
            for db in self.databases.values()
            if db.conn is not None and not db.conn.closed
        }
        # Notifications may have come with the last statements: already read, no input.
        if any([self._woken(db, read=False) for db in conns.values()]):
            return
        while not self.stopping and not self._reload_requested:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            readable = self.wait_readable(conns, left)
            # A list, not a generator: drain every readable connection.
            if any([self._woken(conns[fd]) for fd in readable]):
                return

    def _woken(self, db: DatabaseState, read: bool = True) -> bool:
        """Whether a force_tick notification came for ``db`` (its tick is then due now);
        ``read``: its socket is readable, take in what came.

        libpq's calls, not psycopg's notifies(): this runs at every wake-up, and psycopg
        would wait on the socket once more to find nothing.
        """
        assert db.conn is not None
        pgconn = db.conn.pgconn
        try:
            if read:
                pgconn.consume_input()
            woken, db.notified = db.notified, False
            while pgconn.notifies() is not None:
                woken = True
        except psycopg.Error:
            return True  # broken: the next round reconnects
        if woken:
            db.next_tick = time.monotonic()
        return woken

    @property
    def loop_delay(self) -> float:  # type: ignore[override]
        # The longest wait between rounds; sleep() wakes earlier for any timer.
        return max(self.settings.ticker_period, 1.0)
