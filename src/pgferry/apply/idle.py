"""What the worker does while nothing happens: wait, and look cheaply whether to wake.

An idle worker should cost next to nothing, yet notice within ``loop_delay`` anything an
operator asks of it.  :class:`IdleWatch` gives the loop three answers:

* :meth:`IdleWatch.wait` blocks until the provider's next tick (a notification), a signal
  or the end of ``loop_delay``: no CPU between them.  A root waits for its own queue's
  ticks (writes move the sequences it publishes), at most once per ``loop_delay``, and
  while nothing changes it doubles its wait up to ``ROOT_IDLE_WAIT``.
* :meth:`IdleWatch.take_due` says whether the provider may have a batch: a tick was
  announced, more ticks waited behind the last batch, the connection is new, or the batch
  choice depends on time (``pgq_keep_lag``, ``pgq_batch_collect_interval``).  Otherwise the
  provider is not asked at all (asking writes the consumer's row there).
* :meth:`IdleWatch.quiet` says whether a whole loop can be skipped: no tick came, every
  table is ``ok``, no compare request waits, nothing periodic is due, and one query (the
  *wake state*) shows that nothing the loop reads has changed since the last full loop:
  the registry rows, the sequences' positions (a root publishes them ahead), compare
  requests, the node's rows and its provider, pause and ``uptodate``.

Periodic writes are spaced out while idle: the heartbeat (``local_state.last_seen``) at
most every ``HEARTBEAT_EVERY`` seconds (a batch refreshes it too; at once after an error or
a pause change), the watermark every ``watermark_period`` after batches with events, and
every ``WATERMARK_REFRESH`` seconds otherwise (an idle queue's ticks do not need it:
rotation keeps what the last report keeps).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgferry.queue import api as queue_api

# Seconds between heartbeat writes while idle: last_seen is at most this old on a live
# worker.  Longer than ticker_idle_period (60 s): on a subscriber the idle queue's tick
# refreshes it first, so an idle subscriber writes no heartbeat of its own.
HEARTBEAT_EVERY = 90.0
# Seconds after which a watermark is reported again when no event was applied since.
WATERMARK_REFRESH = 300.0
# Longest wait of an idle root: its own queue's ticks wake it, so this only bounds how late
# it sees a sequence that moved without any replicated write (or a local change).
ROOT_IDLE_WAIT = 8.0
# Seconds after which an idle worker runs a whole loop even though nothing seems to have
# changed (what the wake state does not cover: a destination's columns, Spark's start).
FULL_LOOP_EVERY = 60.0
# Seconds after which the provider is asked for a batch without a tick announced (a
# notification cannot get lost on a live connection; a new one asks at once).
TAKE_EVERY = 300.0

# One statement, so one round trip on an autocommit connection.  xmin changes with every
# insert and update of a row; a deleted row drops out of the text.
WAKE_STATE = sql.SQL(
    """
    select md5(concat_ws('|',
             (select string_agg(concat_ws(',', t.table_name, t.xmin), ';' order by t.table_name)
                from ferry.table_info t where t.queue_name = %(q)s),
             (select string_agg(concat_ws(',', s.seq_name, s.xmin,
                                          pg_sequence_last_value(to_regclass(s.seq_name))),
                                ';' order by s.seq_name)
                from ferry.seq_info s where s.queue_name = %(q)s),
             (select string_agg(concat_ws(',', r.consumer_name, r.xmin), ';'
                                order by r.consumer_name)
                from ferry.sync_request r where r.queue_name = %(q)s),
             (select concat_ws(',', n.xmin) from ferry_node.node_info n
               where n.queue_name = %(q)s),
             (select string_agg(concat_ws(',', l.node_name, l.xmin), ';' order by l.node_name)
                from ferry_node.node_location l where l.queue_name = %(q)s),
             (select string_agg(concat_ws(',', s.consumer_name, s.provider_node, s.paused,
                                          s.uptodate), ';' order by s.consumer_name)
                from ferry_node.local_state s where s.queue_name = %(q)s))),
           coalesce((select bool_and(t.merge_state = 'ok') from ferry.table_info t
                      where t.queue_name = %(q)s and t.local), true)
             and not exists (select 1 from ferry.sync_request r where r.queue_name = %(q)s)
    """
)


@dataclass(frozen=True)
class WakeState:
    signature: str
    settled: bool  # every table ok and no compare request: nothing runs beside the loop


def wake_state(conn: psycopg.Connection, queue: str) -> WakeState:
    row = conn.execute(WAKE_STATE, {"q": queue}).fetchone()
    assert row is not None
    return WakeState(row[0], bool(row[1]))


class IdleWatch:
    """The worker's idle bookkeeping (see the module docstring)."""

    def __init__(self) -> None:
        self.tick_heard = False  # a tick was announced since the provider was last asked
        self.applied = False  # the last loop did some work (a batch)
        self.behind = False  # more ticks waited behind the last batch taken
        self.timed = False  # batches become due with time (pgq_keep_lag, collect interval)
        self.polling = False  # a provider that does not announce its ticks: ask every loop
        self._baseline: WakeState | None = None
        self._full_at = 0.0  # when the last whole loop ran
        self._taken_at = 0.0  # when the provider was last asked for a batch
        self._heartbeat_at = 0.0
        self._heartbeat_now = True  # start, error, pause change: write one at once
        self._watermark_at = time.monotonic()  # the first a period after start
        self._watermark_moved = True
        self._quiet_loops = 0  # loops skipped in a row
        self._loop_at = 0.0  # when the last loop ran (a root's pace)

    # --- the wait ------------------------------------------------------------------------
    def wait(
        self,
        source: psycopg.Connection | None,
        queue: str,
        seconds: float,
        wait_readable: Callable[[list[int], float], set[int]],
        stop: Callable[[], bool],
        *,
        root: bool = False,
    ) -> None:
        """Until the next tick of ``queue`` announced on ``source`` (the provider; a
        root's own database), a signal or ``seconds``.  A root waits longer while its loops
        find nothing to do, and a tick ends its wait no sooner than ``seconds`` after its
        last loop."""
        start = time.monotonic()
        deadline = start + seconds
        if root and self._quiet_loops:
            deadline = start + min(seconds * 2**self._quiet_loops, max(seconds, ROOT_IDLE_WAIT))
        ready = True  # notifications may have come with the last statements
        while not stop():
            if ready and self.listen(source, queue):
                if not root:
                    return
                self.tick_heard = False  # the sequences it moved show in the wake state
                deadline = min(deadline, max(start, self._loop_at + seconds))
            left = deadline - time.monotonic()
            if left <= 0:
                return
            usable = source is not None and not source.closed
            ready = bool(wait_readable([source.fileno()] if usable else [], left))  # type: ignore[union-attr]

    def listen(self, provider: psycopg.Connection | None, queue: str) -> bool:
        """Whether a tick of ``queue`` was announced (read without waiting, no round trip:
        notifications arrive on their own, also while other statements run)."""
        if provider is not None and not provider.closed:
            try:
                if queue_api.wait_for_tick(provider, queue, 0):
                    self.tick_heard = True
            except psycopg.Error:
                self.tick_heard = True  # broken: the next loop reconnects
        return self.tick_heard

    def connected(self, announces: bool) -> None:
        """A new provider connection (ask it at once); ``announces``: it notifies its
        ticks (queue version 8)."""
        self.polling = not announces
        self.tick_heard = True

    # --- what to do ----------------------------------------------------------------------
    def take_due(self) -> bool:
        """Whether to ask the provider for a batch now."""
        now = time.monotonic()
        due = (
            self.timed
            or self.polling
            or self.tick_heard
            or self.behind
            or now - self._taken_at >= TAKE_EVERY
        )
        if due:
            self.tick_heard = False
            self._taken_at = now
        return due

    def quiet(self, conn: psycopg.Connection | None, queue: str, copying: bool) -> bool:
        """Whether this loop can be skipped (see the module docstring).

        A loop that is not skipped takes the wake state read here as its baseline, so a
        change made while it runs wakes the next one.
        """
        now = time.monotonic()
        self._loop_at = now
        busy = self.applied or self.tick_heard or self.polling or self.timed or copying
        if conn is None or busy or self._periodic_due(now):
            self._baseline = None
            self._full_at = now
            self._quiet_loops = 0
            return False
        state = wake_state(conn, queue)
        if state.settled and state == self._baseline and now - self._full_at < FULL_LOOP_EVERY:
            self._quiet_loops += 1
            return True
        self._baseline = state if state.settled else None
        self._full_at = now
        self._quiet_loops = 0
        return False

    def _periodic_due(self, now: float) -> bool:
        return self.heartbeat_due(now) or (
            self._watermark_moved and now - self._watermark_at >= self.watermark_period
        )

    watermark_period = 5.0  # the worker sets its watermark_period

    # --- periodic writes -----------------------------------------------------------------
    def heartbeat_due(self, now: float) -> bool:
        return self._heartbeat_now or now - self._heartbeat_at >= HEARTBEAT_EVERY

    def heartbeat_done(self) -> None:
        """A heartbeat was written, or a batch refreshed last_seen."""
        self._heartbeat_at = time.monotonic()
        self._heartbeat_now = False

    def heartbeat_soon(self) -> None:
        """After an error or a pause change: last_seen, uptodate and the error line must
        follow at once."""
        self._heartbeat_now = True

    def watermark_due(self, moved: bool) -> bool:
        """Whether to report the watermark now; ``moved``: events were applied since the
        last report."""
        now = time.monotonic()
        self._watermark_moved = self._watermark_moved or moved
        if now - self._watermark_at < self.watermark_period:
            return False
        if not self._watermark_moved and now - self._watermark_at < WATERMARK_REFRESH:
            return False
        self._watermark_at = now
        self._watermark_moved = False
        return True
