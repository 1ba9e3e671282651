"""What the worker does while nothing happens: look cheaply whether to run a whole loop.

A whole loop of a subscriber reads its node, routes, sequences and compare requests, asks
the provider for a batch (which writes the consumer's row there) and writes a heartbeat:
a dozen statements.  While nothing happens an idle worker should cost next to nothing,
yet notice within ``loop_delay`` anything it must act on.  :class:`IdleWatch` decides,
before each loop, whether the loop can be skipped:

* never after a loop that did some work, after an error or a new connection, while copies
  run, or when a periodic write is due (heartbeat, watermark, a whole loop at least every
  ``FULL_LOOP_EVERY`` seconds);
* never when a tick of the queue was announced (``Worker.sleep`` hears the notification);
* otherwise one read on the node (the *wake state*) must show that nothing the loop reads
  has changed since the last whole loop (registry rows, sequences' positions, compare
  requests, the node's rows, its provider, pause and position), that every table is
  ``ok`` and no compare request waits; and, on a subscriber, one read-only statement on
  the provider (:func:`pgferry.queue.ticks.batch_waiting`) must show no batch to take.

The provider is asked every loop and does not depend on notifications: a notification
lost with a connection, or a tick made where none is sent, delays a batch by at most
``loop_delay``, never longer.  An idle subscriber thus costs two reads per ``loop_delay``
and no write.  A root, which only publishes its sequences ahead, one read per wait, and
its wait doubles up to ``ROOT_BACKOFF`` loop_delays while nothing changes; a tick of its
queue (a write) ends it.

Periodic writes are spaced out while idle: the heartbeat (``local_state.last_seen``) at
most every ``HEARTBEAT_EVERY`` seconds (a batch refreshes it too; at once when the node is
not ``uptodate`` or shows an error), the watermark every ``watermark_period`` after batches
that carried events of the provider's queue (for this node or not: a partial leaf that
applies none still moves on) and every ``WATERMARK_REFRESH`` seconds otherwise (an idle
queue keeps no events the last report does not already cover).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgferry.node import model
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import copystate, entries
from pgferry.sync import serve

# Seconds between heartbeat writes while idle: last_seen is at most this old on a live,
# idle worker.  Longer than ticker_idle_period (60 s): on a subscriber the idle queue's
# tick is a batch, whose tick record refreshes last_seen first.
HEARTBEAT_EVERY = 90.0
# Seconds after which a watermark is reported again when no event was applied since.
WATERMARK_REFRESH = 300.0
# Seconds after which an idle worker runs a whole loop even though nothing seems to have
# changed (what the wake state does not cover: a destination's columns, the provider's
# view of the consumer).  On a subscriber the idle queue's tick comes first.
FULL_LOOP_EVERY = 90.0
# A root's idle wait doubles, up to this many loop_delays, while its loops find nothing
# to do; a tick of its queue (writes: the sequences may have moved) ends the wait, at most
# once per loop_delay.
ROOT_BACKOFF = 8

# One statement, so one round trip: the stamps of the registry, the compare requests and
# the node, each read as its owner writes it down; whether every table is ok and no request
# waits; whether a consumer is behind or failed.
_Q = sql.Placeholder("q")
WAKE_STATE = sql.SQL(
    "select md5(concat_ws('|', {registry}, {requests}, {node})), ({settled}) and {no_request},"
    " {trouble}"
).format(
    registry=entries.STAMP.format(q=_Q),
    requests=serve.REQUESTS_STAMP.format(q=_Q),
    node=model.NODE_STAMP.format(q=_Q),
    settled=copystate.SETTLED.format(q=_Q),
    no_request=serve.NO_REQUEST.format(q=_Q),
    trouble=model.NODE_TROUBLE.format(q=_Q),
)


def wait_for_ticks(
    conn: psycopg.Connection,
    queue: str,
    deadline: float,
    on_tick: Callable[[float], float | None],
    wait_readable: Callable[[Iterable[int], float], set[int]],
    stop: Callable[[], bool],
) -> None:
    """Block in poll() on ``conn`` (listening to ticks) until ``deadline``, a signal or
    ``stop()``; notifications are read only when the socket is readable (psycopg's own
    timed wait for them wakes every few milliseconds).  At a tick of ``queue``,
    ``on_tick(deadline)`` gives the new deadline, or None to return at once."""
    readable = True  # notifications may have come with the last statements
    while not stop():
        if readable and queue_ticks.wait_for_tick(conn, queue, 0):
            moved = on_tick(deadline)
            if moved is None:
                return
            deadline = moved
        left = deadline - time.monotonic()
        if left <= 0:
            return
        readable = bool(wait_readable([conn.fileno()], left))


@dataclass(frozen=True)
class WakeState:
    signature: str
    settled: bool  # every table ok and no compare request: nothing runs beside the loop
    heartbeat_wanted: bool  # pause changed (uptodate cleared) or an error is shown


def wake_state(conn: psycopg.Connection, queue: str) -> WakeState:
    """Read on an autocommit connection to the node (one round trip)."""
    row = conn.execute(WAKE_STATE, {"q": queue}).fetchone()
    assert row is not None
    return WakeState(row[0] or "", bool(row[1]), bool(row[2]))


class IdleWatch:
    """The worker's idle bookkeeping (see the module docstring)."""

    def __init__(self, watermark_period: float) -> None:
        self.watermark_period = watermark_period
        self.tick_heard = False  # a tick was announced since the last whole loop
        self.busy = True  # the last loop did some work, failed, or none ran yet
        # Set by each whole loop: the consumer to look for on the provider (None on a root,
        # a paused node or one without a provider: no batch is taken there).
        self.consumer: str | None = None
        self._baseline: WakeState | None = None
        self._full_at = 0.0  # when the last whole loop ran
        self._heartbeat_at = 0.0
        self._heartbeat_now = True  # start, error, pause change: write one at once
        self._watermark_at = time.monotonic()  # the first a period after start
        self._watermark_moved = True
        self.quiet_loops = 0  # loops skipped in a row

    def root_wait(self, loop_delay: float) -> float:
        """How long an idle root waits for a tick before its next loop."""
        wait: float = loop_delay * min(2**self.quiet_loops, ROOT_BACKOFF)
        return wait

    def quiet(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection | None,
        queue: str,
        *,
        copying: bool,
    ) -> bool:
        """Whether this loop can be skipped.  A loop that is not skipped takes the wake
        state read here as its baseline, so a change made while it runs wakes the next."""
        now = time.monotonic()
        if self.busy or self.tick_heard or copying or self._periodic_due(now):
            return self._whole_loop(now, None)
        state = wake_state(local, queue)
        if state.heartbeat_wanted:
            self._heartbeat_now = True
        if not state.settled or state != self._baseline or state.heartbeat_wanted:
            return self._whole_loop(now, state if state.settled else None)
        if self.consumer is not None:
            if provider is None or provider.closed:
                return self._whole_loop(now, state)
            if queue_ticks.batch_waiting(provider, queue, self.consumer):
                return self._whole_loop(now, state)
        self.quiet_loops += 1
        return True

    def _whole_loop(self, now: float, baseline: WakeState | None) -> bool:
        self._baseline = baseline
        self._full_at = now
        self.tick_heard = False
        self.quiet_loops = 0
        return False

    def loop_done(self, more: bool) -> None:
        """A whole loop ended; ``more``: it did some work (look again at once)."""
        self.busy = more

    def failed(self) -> None:
        """The loop failed: the next one runs whole and writes a heartbeat."""
        self.busy = True
        self._heartbeat_now = True

    def _periodic_due(self, now: float) -> bool:
        return (
            now - self._full_at >= FULL_LOOP_EVERY
            or self.heartbeat_due(now)
            or (self._watermark_moved and now - self._watermark_at >= self.watermark_period)
        )

    # --- periodic writes -----------------------------------------------------------------
    def heartbeat_due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self._heartbeat_now or now - self._heartbeat_at >= HEARTBEAT_EVERY

    def heartbeat_done(self) -> None:
        """A heartbeat was written, or a batch refreshed last_seen."""
        self._heartbeat_at = time.monotonic()
        self._heartbeat_now = False

    def events_applied(self) -> None:
        """A batch carried events: the watermark moves, report it after watermark_period."""
        self._watermark_moved = True

    def watermark_due(self) -> bool:
        """Whether to report the watermark now (and count it reported)."""
        now = time.monotonic()
        if now - self._watermark_at < self.watermark_period:
            return False
        if not self._watermark_moved and now - self._watermark_at < WATERMARK_REFRESH:
            return False
        self._watermark_at = now
        self._watermark_moved = False
        return True
