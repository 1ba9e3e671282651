"""Reading a queue: the consumer class used by the worker, the demo and tests.

A consumer registers on a queue and then loops: take the next batch (the events between
two ticks), process its events, finish the batch.  Everything queue-side happens on one
connection that the consumer owns; see :class:`Consumer` for what is committed when.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgferry.db import error_text
from pgferry.errors import QueueError

log = logging.getLogger(__name__)

# Rows fetched per round trip when streaming a batch through a cursor: big enough to keep
# round trips rare, small enough that a huge batch never sits in memory at once.
DEFAULT_FETCH_SIZE = 300

EVENT_COLUMNS = (
    "ev_id",
    "ev_time",
    "ev_txid",
    "ev_retry",
    "ev_type",
    "ev_data",
    "ev_extra1",
    "ev_extra2",
    "ev_extra3",
    "ev_extra4",
)


@dataclass
class Event:
    """One queued event (columns as in docs/events.md)."""

    ev_id: int
    ev_time: datetime
    ev_txid: int
    ev_retry: int | None
    ev_type: str
    ev_data: str | None
    ev_extra1: str | None = None
    ev_extra2: str | None = None
    ev_extra3: str | None = None
    ev_extra4: str | None = None
    retry_seconds: int | None = field(default=None, repr=False)

    def tag_retry(self, seconds: int = 60) -> None:
        """Deliver this event again (to this consumer only) ``seconds`` after finishing."""
        self.retry_seconds = seconds


@dataclass
class BatchInfo:
    """What ``ferry_queue.get_batch_info`` says about an open batch."""

    batch_id: int
    queue_name: str
    consumer_name: str
    batch_start: datetime
    batch_end: datetime
    prev_tick_id: int
    tick_id: int
    lag: timedelta
    seq_start: int
    seq_end: int
    prev_snapshot: str
    snapshot: str


class Batch:
    """An open batch: its info and a lazily streamed sequence of events."""

    def __init__(self, consumer: Consumer, info: BatchInfo) -> None:
        self.consumer = consumer
        self.info = info
        self.batch_id = info.batch_id
        self._retried: list[Event] = []
        self._current: Event | None = None  # last event handed out, may be tagged later

    def events(self, extra_where: str | None = None) -> Iterator[Event]:
        """Stream the batch's events in ``ev_id`` order through a server-side cursor.

        ``extra_where`` is an SQL condition on the event columns evaluated in the database
        (e.g. a table filter on ``ev_extra1``).  Must be consumed inside the batch's
        transaction (i.e. inside :meth:`Consumer.process_batch` or before finishing).
        """
        conn = self.consumer.conn
        cursor_name = f"ferry_batch_{self.batch_id}"
        size = self.consumer.fetch_size
        rows = conn.execute(
            "select * from ferry_queue.get_batch_cursor(%s, %s, %s, %s)",
            (self.batch_id, cursor_name, size, extra_where),
        ).fetchall()
        try:
            while True:
                for row in rows:
                    self._collect_tagged()
                    self._current = Event(*row)
                    yield self._current
                if len(rows) < size:
                    break
                rows = conn.execute(
                    sql.SQL("fetch {} from {}").format(
                        sql.Literal(size), sql.Identifier(cursor_name)
                    )
                ).fetchall()
        finally:
            if (
                not conn.broken
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            ):
                conn.execute(sql.SQL("close {}").format(sql.Identifier(cursor_name)))

    def event_sql(self) -> str:
        """A SELECT any connection can run to read this batch (see ``batch_event_sql``)."""
        row = self.consumer.conn.execute(
            "select ferry_queue.batch_event_sql(%s)", (self.batch_id,)
        ).fetchone()
        assert row is not None
        return row[0]

    def _collect_tagged(self) -> None:
        if self._current is not None and self._current.retry_seconds is not None:
            self._retried.append(self._current)
        self._current = None

    def retry_tagged(self) -> int:
        """Send events tagged with :meth:`Event.tag_retry` to the retry queue."""
        self._collect_tagged()
        for event in self._retried:
            self.consumer.conn.execute(
                "select ferry_queue.event_retry(%s, %s, %s)",
                (self.batch_id, event.ev_id, event.retry_seconds),
            )
        count = len(self._retried)
        self._retried.clear()
        return count


class Consumer:
    """A registered reader of one queue.

    Commit semantics: every queue call runs on :attr:`conn` (a non-autocommit connection
    that belongs to this object).  :meth:`process_batch` takes the next batch, hands it to
    the handler, records retries and finishes the batch, and commits all of that together
    once the handler has returned.  If the handler raises, the transaction is rolled back,
    so the batch stays unfinished and the same events come again on the next call: delivery
    is *at least once*.  A handler that writes into another database gets exactly-once by
    committing its own work together with the batch's tick id there, and skipping a batch
    whose tick it has already applied (see ``ferry_node.local_state``).  Finishing a batch
    before that other commit succeeded could lose it, so the queue commit comes last.
    """

    def __init__(
        self,
        connstr: str | psycopg.Connection,
        queue: str,
        consumer: str,
        *,
        fetch_size: int = DEFAULT_FETCH_SIZE,
        min_count: int | None = None,
        min_interval: timedelta | None = None,
        min_lag: timedelta | None = None,
    ) -> None:
        if isinstance(connstr, psycopg.Connection):
            self.conn = connstr
            self._own_conn = False
        else:
            from pgferry.db import connect

            self.conn = connect(connstr)
            self._own_conn = True
        self.queue = queue
        self.consumer = consumer
        self.fetch_size = fetch_size
        self.min_count = min_count
        self.min_interval = min_interval
        self.min_lag = min_lag

    # --- registration --------------------------------------------------------------------
    def register(self) -> bool:
        """Register at the queue's latest tick; False if already registered."""
        row = self._call("select ferry_queue.register_consumer(%s, %s)", commit=True)
        return bool(row and row[0])

    def unregister(self) -> None:
        self._call("select ferry_queue.unregister_consumer(%s, %s)", commit=True)

    def info(self) -> dict:
        """Lag, last tick, open batch and pending events of this consumer."""
        idle = self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with self.conn.cursor(row_factory=dict_row) as cur:
            try:
                cur.execute(
                    "select * from ferry_queue.get_consumer_info(%s, %s)",
                    (self.queue, self.consumer),
                )
                row = cur.fetchone()
            except psycopg.Error as exc:
                self.conn.rollback()
                raise QueueError(error_text(exc)) from None
            finally:
                if idle and not self.conn.closed:
                    self.conn.rollback()  # leave no idle transaction behind; never end a batch
        assert row is not None
        return row

    # --- batches -------------------------------------------------------------------------
    def next_batch(self) -> Batch | None:
        """Open the next batch in the current transaction (None when nothing is ready).

        Returns the same batch again until it is finished, so a crash between taking and
        finishing a batch simply repeats it.
        """
        if self.min_count is None and self.min_interval is None and self.min_lag is None:
            row = self._call("select ferry_queue.next_batch(%s, %s)")
        else:
            row = self._call(
                "select ferry_queue.next_batch_custom(%s, %s, %s, %s, %s)",
                self.min_lag,
                self.min_count,
                self.min_interval,
            )
        if row is None or row[0] is None:
            return None
        batch_id = row[0]
        info = self.conn.execute(
            "select * from ferry_queue.get_batch_info(%s)", (batch_id,)
        ).fetchone()
        assert info is not None
        return Batch(self, BatchInfo(batch_id, *info))

    def finish_batch(self, batch: Batch) -> None:
        """Record retries and finish ``batch`` in the current transaction (no commit)."""
        batch.retry_tagged()
        self.conn.execute("select ferry_queue.finish_batch(%s)", (batch.batch_id,))

    def process_batch(self, handler: Callable[[Batch], None]) -> BatchInfo | None:
        """Take one batch, call ``handler(batch)``, finish it and commit.

        Returns the batch's info, or None when no batch was ready (nothing to commit).
        """
        try:
            batch = self.next_batch()
            if batch is None:
                self.conn.rollback()
                return None
            handler(batch)
            self.finish_batch(batch)
            self.conn.commit()
            return batch.info
        except BaseException:
            if not self.conn.closed:
                self.conn.rollback()
            raise

    def run(self, handler: Callable[[Batch], None], max_batches: int | None = None) -> int:
        """Process batches until none is ready (or ``max_batches``); returns how many."""
        done = 0
        while max_batches is None or done < max_batches:
            if self.process_batch(handler) is None:
                break
            done += 1
        return done

    def close(self) -> None:
        if self._own_conn and not self.conn.closed:
            self.conn.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals -----------------------------------------------------------------------
    def _call(self, query: str, *extra: object, commit: bool = False):
        try:
            row = self.conn.execute(query, (self.queue, self.consumer, *extra)).fetchone()  # type: ignore[arg-type]
        except psycopg.Error as exc:
            self.conn.rollback()
            raise QueueError(error_text(exc)) from None
        if commit:
            self.conn.commit()
        return row
