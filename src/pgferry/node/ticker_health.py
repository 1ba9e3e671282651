"""Whether the root's ticker is ticking: the rule that ``wait-*``, ``status``, the workers
and their metrics share.

No process reports that the ticker runs: an idle queue is ticked once per
``ticker_idle_period`` and writes nothing in between, by design.  What shows a stopped
ticker is a queue that has events waiting and no tick for them: while events wait, a
running ticker ticks within ``ticker_period`` plus the queue's ``ticker_max_lag`` (1 s
and 50 ms by default).  So the root's ticker *counts as stopped* when events have been
added since its newest tick and that tick is older than ``ticker_stopped_after`` seconds
(a node setting, default 10) and than three times the queue's ``ticker_max_lag``.  A queue
with no event waiting is never reported, however old its last tick: that is an idle queue.
A queue ticked from outside (a branch) is not looked at; its root's is.

The reading is one statement on the root's database (:func:`read`); :class:`StallLog` is the
worker's use of it: at most one look per ``CHECK_EVERY`` seconds, one warning when the
ticker stops and one line when it ticks again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import psycopg

from pgferry import settings
from pgferry.config import Config
from pgferry.queue import api as queue_api

log = logging.getLogger(__name__)

STOPPED_AFTER = settings.TICKER_STOPPED_AFTER.fixed
MAX_LAG_TIMES = 3  # ... and never less than this many ticker_max_lag
CHECK_EVERY = 10.0  # seconds between a worker's looks (less when ticker_stopped_after is)
REMEDY = "is `pgferry pgqd.ini ticker` running?"


@dataclass(frozen=True)
class TickerReading:
    """The root queue's ticker as one read saw it."""

    queue: str
    last_tick: int | None
    seconds: float  # since the newest tick
    waiting: int  # events added since the newest tick
    max_lag: float  # the queue's ticker_max_lag, in seconds
    paused: bool  # the queue's ticker_paused

    def threshold(self, stopped_after: float) -> float:
        return max(stopped_after, MAX_LAG_TIMES * self.max_lag)

    def stopped(self, stopped_after: float) -> bool:
        """The rule of the module docstring."""
        return self.waiting > 0 and self.seconds > self.threshold(stopped_after)

    def line(self, root: str | None = None) -> str:
        """'the root's ticker has not ticked for 62 s while 10 events wait: is ...'
        (with ``root``: 'the ticker of root src has ...')."""
        events = f"{self.waiting} event{'s' if self.waiting != 1 else ''}"
        verb = "wait" if self.waiting != 1 else "waits"
        why = (
            f"its queue {self.queue} has ticker_paused set (set-queue-config)"
            if self.paused
            else REMEDY
        )
        who = "the root's ticker" if root is None else f"the ticker of root {root}"
        return f"{who} has not ticked for {self.seconds:.0f} s while {events} {verb}: {why}"


def stopped_after(config: Config | None) -> float:
    """The ``ticker_stopped_after`` setting (seconds)."""
    if config is None:
        return STOPPED_AFTER
    return config.get(settings.TICKER_STOPPED_AFTER)


def read(conn: psycopg.Connection, queue: str) -> TickerReading | None:
    """The ticker of ``queue`` on ``conn``'s database; None when this database has no such
    queue or ticks it from outside (a branch's: not a root's ticker)."""
    found = [q for q in queue_api.queue_info(conn, queue) if not q["queue_external_ticker"]]
    if not found:
        return None
    q = found[0]
    lag, max_lag = q["ticker_lag"], q["queue_ticker_max_lag"]
    return TickerReading(
        queue,
        q["last_tick_id"],
        lag.total_seconds() if lag is not None else 0.0,
        max(int(q["ev_new"] or 0), 0),
        max_lag.total_seconds() if max_lag is not None else 0.0,
        q["queue_ticker_paused"],
    )


def stopped(conn: psycopg.Connection, queue: str, after: float) -> TickerReading | None:
    """The reading when the ticker of ``queue`` on ``conn`` counts as stopped, else None."""
    reading = read(conn, queue)
    return reading if reading is not None and reading.stopped(after) else None


class StallLog:
    """A worker's watch on the root's ticker: looks at most every ``CHECK_EVERY`` seconds,
    logs a warning when the ticker stops and a line when it ticks again, once each.
    ``stalled`` is what the metrics show: None while not watched (no root queue on the
    connection it was given), else whether the ticker counts as stopped."""

    def __init__(self, after: float) -> None:
        self.after = after
        self.stalled: bool | None = None
        self._looked_at = float("-inf")
        self._warned = False

    def look(self, conn: psycopg.Connection | None, queue: str) -> None:
        """Read the ticker of ``queue`` on ``conn`` (the root's database: the node's own on
        a root, the provider's on a node reading from the root) when a look is due."""
        now = time.monotonic()
        if conn is None or conn.closed or now - self._looked_at < min(CHECK_EVERY, self.after):
            return
        self._looked_at = now
        reading = read(conn, queue)
        if reading is None:
            self.stalled = None
            self._warned = False
            return
        self.stalled = reading.stopped(self.after)
        if self.stalled and not self._warned:
            log.warning("%s", reading.line()[0].upper() + reading.line()[1:])
            self._warned = True
        elif not self.stalled and self._warned:
            log.info("The root's ticker ticks again (tick %s)", reading.last_tick)
            self._warned = False
