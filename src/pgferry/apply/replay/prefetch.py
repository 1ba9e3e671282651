"""The main stream's next batch, read on the provider while this one is applied.

During a catch-up the provider's part of a batch (its summary, the reads of its tables)
and the subscriber's apply would run one after the other, each leaving a core idle.  The
next batch's events are fixed by two ticks that exist already, though: this batch's last
and the one the worker will choose next.  So while batch N is applied, a thread
(:class:`Prefetch`) asks the queue for that tick by the rule the worker's batches are
taken with (:func:`pgferry.queue.batches.batch_tick`: the first tick closing
``batch_min_events`` events, else the last one), builds the event query of the tick range
(:func:`pgferry.queue.batches.tick_range_event_sql`, whose text
:func:`~pgferry.queue.batches.batch_event_sql` gives the batch once open),
summarises it, and once no read of batch N is left running starts reading its tables on a
reader pool of its own.

Nothing is opened or finished early.  After batch N is committed and finished, the worker
opens exactly that tick range with ``next_batch_upto`` (:meth:`Prefetch.take`), and the
apply (:mod:`.batch`) uses what was read ahead only when the opened batch's event query is
the same text and the routes and sequences are those it was summarised for; otherwise it
is dropped and the batch is read as any other.  The batch's position bookkeeping is that
of every batch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass

import psycopg

from pgferry.apply.replay.batch_sql import Segment, SummaryRow
from pgferry.apply.replay.part_reads import ReaderPool
from pgferry.apply.replay.plan import PlanInputs
from pgferry.apply.replay.read import APPLICATION_NAME, set_text_format
from pgferry.apply.replay.summary import count_scripts, summarize
from pgferry.db import connect
from pgferry.queue import batches as queue_batches
from pgferry.registry.routes import Route

log = logging.getLogger(__name__)

READS_WAIT = 60.0  # seconds the next batch's reads wait for the current one's at most
_ANY = 2**31 - 1  # next_batch_upto's count that no tick closes: the batch ends at its tick


def choose_tick(
    conn: psycopg.Connection, queue: str, prev: int, min_events: int
) -> tuple[int, int] | None:
    """(tick, its events) the worker's next batch after tick ``prev`` ends at, by the
    queue's rule the worker takes its batches with; None: no later tick."""
    return queue_batches.batch_tick(conn, queue, prev, queue_batches.BatchRule(most=min_events))


@dataclass(frozen=True)
class NextBatch:
    """What to read ahead: the batch after tick ``after_tick`` of ``consumer`` on
    ``queue``, cut as the worker cuts it (``min_events``), for these routes and sequences
    (``plan``: None reads only its summary)."""

    queue: str
    consumer: str
    after_tick: int
    min_events: int
    routes: dict[str, Route]
    seqs: list[str]
    plan: PlanInputs | None


@dataclass(frozen=True)
class Ahead:
    """The next batch as read ahead: its tick range, event query and summary."""

    queue: str
    consumer: str
    prev_tick: int
    tick: int
    batch_sql: str
    summary: list[SummaryRow]
    routes: dict[str, Route]
    seqs: list[str]
    reads: bool  # its tables' reads were started on the prefetch's pool


class Prefetch:
    """One batch read ahead by a thread; see the module docstring."""

    def __init__(
        self, conn: psycopg.Connection, pool: ReaderPool, busy: list[ReaderPool], want: NextBatch
    ) -> None:
        self._conn, self._pool, self._busy, self._want = conn, pool, busy, want
        self._cancelled = threading.Event()
        self.result: Ahead | None = None
        self._thread = threading.Thread(target=self._run, name="pgferry-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self._read(self._want)
        except Exception as exc:  # noqa: BLE001 - the batch is then read the usual way
            log.debug("reading the next batch ahead: %s", exc)
            self._pool.drop_ahead()

    def _read(self, want: NextBatch) -> Ahead | None:
        queue, consumer, prev = want.queue, want.consumer, want.after_tick
        routes, seqs, plan_inputs = want.routes, want.seqs, want.plan
        conn = self._conn
        chosen = choose_tick(conn, queue, prev, want.min_events)
        if chosen is None:
            return None
        tick, count = chosen
        # The text batch_event_sql gives the batch once it is open: the apply compares them.
        batch_sql = queue_batches.tick_range_event_sql(conn, queue, consumer, prev, tick)
        if batch_sql is None or self._cancelled.is_set():
            return None
        summary = summarize(conn, batch_sql, routes, seqs, Segment(), scripts=True, removals=True)
        reads = False
        if plan_inputs and count > plan_inputs.read_ahead_events and not count_scripts(summary):
            whole_updates = not (0 < plan_inputs.second_events < count)
            plan = plan_inputs.plan(summary, routes, seqs, ranges=True, whole_updates=whole_updates)
            if len(plan.tables) > 1 and self._wait_reads_done():
                self._pool.start_ahead(plan.tables, batch_sql, Segment())
                reads = True
        return Ahead(queue, consumer, prev, tick, batch_sql, summary, routes, seqs, reads)

    def _wait_reads_done(self) -> bool:
        """Until the current batch's reads are all done (they have the provider's CPU
        first) and what was read ahead for it was taken; False when cancelled, or after
        READS_WAIT seconds (the batch is then read when it is applied)."""
        deadline = time.monotonic() + READS_WAIT
        while not self._cancelled.is_set() and time.monotonic() < deadline:
            if not self._pool.has_ahead() and all(p.wait_idle(0.05) for p in self._busy):
                return True
        return False

    def take(
        self, provider: psycopg.Connection, queue: str, consumer: str, last_tick: int | None
    ) -> tuple[int | None, Ahead | None]:
        """Open the batch read ahead (its id and what was read), once the batch before it
        is finished; (None, None) when there is none or the consumer is elsewhere."""
        self._thread.join()
        ahead = self.result
        if ahead is None or (ahead.queue, ahead.consumer, ahead.prev_tick) != (
            queue,
            consumer,
            last_tick,
        ):
            self.cancel()
            return None, None
        # Ticks made since may change the batch the worker would take now: then it takes
        # that one, the usual way.
        chosen = choose_tick(provider, queue, ahead.prev_tick, self._want.min_events)
        if chosen is None or chosen[0] != ahead.tick:
            self.cancel()
            return None, None
        # Exactly that tick: no tick before it closes this many events.
        batch_id = queue_batches.next_batch_upto(provider, queue, consumer, ahead.tick, _ANY)
        if batch_id is None:
            self.cancel()
            return None, None
        return batch_id, ahead

    def cancel(self) -> None:
        """Stop the thread and the reads it started."""
        self._cancelled.set()
        if self._thread.is_alive():
            with contextlib.suppress(psycopg.Error):
                self._conn.cancel_safe(timeout=5)
        self._thread.join()
        self._pool.drop_ahead()


class Prefetcher:
    """What the replay keeps for reading ahead between batches: a provider connection of
    its own, a reader pool of its own, and the batch being read ahead."""

    def __init__(self) -> None:
        self.pool: ReaderPool | None = None
        self._conn: psycopg.Connection | None = None
        self._current: Prefetch | None = None

    def start(self, dsn: str, pool_size: int, busy: ReaderPool, want: NextBatch) -> None:
        """Start reading ``want`` (``busy``: the pool reading the current batch, whose
        reads go first)."""
        self.drop()
        if self._conn is None or self._conn.closed:
            self._conn = connect(dsn, autocommit=True, application_name=APPLICATION_NAME)
            set_text_format(self._conn)
        if self.pool is None:
            self.pool = ReaderPool(dsn, pool_size)
        self._current = Prefetch(self._conn, self.pool, [busy, self.pool], want)

    def take(
        self, provider: psycopg.Connection, queue: str, consumer: str, last_tick: int | None
    ) -> tuple[int | None, Ahead | None]:
        """Open the batch read ahead, if any: (its id, what was read), else (None, None)."""
        current, self._current = self._current, None
        if current is None:
            return None, None
        return current.take(provider, queue, consumer, last_tick)

    def drop(self, *, reads: bool = False) -> None:
        """Forget the batch being read ahead (the worker will not take it next); with
        ``reads`` also stop reads started ahead that no batch took."""
        if self._current is not None:
            self._current.cancel()
            self._current = None
        if reads:
            self.drop_reads()

    def drop_reads(self) -> None:
        """Stop reads started ahead that the batch being applied does not use."""
        if self.pool is not None:
            self.pool.drop_ahead()

    def close(self) -> None:
        self.drop()
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
