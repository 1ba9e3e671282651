"""Reading a queue in Python: a generic consumer for applications, tests and benchmarks.

A consumer registers on a queue and then loops: take the next batch (the events between
two ticks), process its events, finish the batch.  Everything queue-side happens on one
connection that the consumer owns; see :class:`Consumer` for what is committed when.  The
replication worker does not use it: it reads a batch as SQL run on the provider (replay
queries) and calls :mod:`pgferry.queue.batches` itself.  Both describe an open batch
with :class:`pgferry.queue.batches.Batch`; :class:`BatchReader` adds the events and retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from pgferry.db import error_text
from pgferry.errors import QueueError
from pgferry.queue import api as queue_api
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import Batch

log = logging.getLogger(__name__)
T = TypeVar("T")

# Rows fetched per round trip when streaming a batch through a cursor: big enough to keep
# round trips rare, small enough that a huge batch never sits in memory at once.
DEFAULT_FETCH_SIZE = 300


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


class BatchReader:
    """An open batch of a :class:`Consumer`: its description and its events, streamed."""

    def __init__(self, consumer: Consumer, info: Batch) -> None:
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
        rows = queue_batches.open_batch_cursor(conn, self.batch_id, cursor_name, size, extra_where)
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
        """A SELECT any connection can run to read this batch in ``ev_id`` order."""
        return queue_batches.batch_event_sql(self.consumer.conn, self.batch_id, ordered=True)

    def _collect_tagged(self) -> None:
        if self._current is not None and self._current.retry_seconds is not None:
            self._retried.append(self._current)
        self._current = None

    def retry_tagged(self) -> int:
        """Send events tagged with :meth:`Event.tag_retry` to the retry queue."""
        self._collect_tagged()
        for event in self._retried:
            assert event.retry_seconds is not None
            queue_batches.event_retry(
                self.consumer.conn, self.batch_id, event.ev_id, event.retry_seconds
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
        return self._call(queue_api.register_consumer, commit=True)

    def unregister(self) -> None:
        self._call(queue_api.unregister_consumer, commit=True)

    def info(self) -> dict[str, Any]:
        """Lag, last tick, open batch and pending events of this consumer."""
        idle = self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        try:
            rows = self._call(queue_api.consumer_info)
        finally:
            if idle and not self.conn.closed:
                self.conn.rollback()  # leave no idle transaction behind; never end a batch
        assert rows
        return rows[0]

    # --- batches -------------------------------------------------------------------------
    def next_batch(self) -> BatchReader | None:
        """Open the next batch in the current transaction (None when nothing is ready).

        Returns the same batch again until it is finished, so a crash between taking and
        finishing a batch simply repeats it.
        """
        if self.min_count is None and self.min_interval is None and self.min_lag is None:
            batch_id = self._call(queue_batches.next_batch, min_count=None)
        else:
            batch_id = self._call(
                queue_batches.next_batch_custom,
                min_lag=self.min_lag,
                min_count=self.min_count,
                min_interval=self.min_interval,
            )
        if batch_id is None:
            return None
        return BatchReader(self, queue_batches.batch_info(self.conn, batch_id))

    def finish_batch(self, batch: BatchReader) -> None:
        """Record retries and finish ``batch`` in the current transaction (no commit)."""
        batch.retry_tagged()
        queue_batches.finish_batch(self.conn, batch.batch_id)

    def process_batch(self, handler: Callable[[BatchReader], None]) -> Batch | None:
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

    def run(self, handler: Callable[[BatchReader], None], max_batches: int | None = None) -> int:
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
    def _call(self, call: Callable[..., T], *, commit: bool = False, **options: Any) -> T:
        """``call(conn, queue, consumer, **options)``; a database error becomes QueueError
        (after a rollback: the transaction is unusable anyway)."""
        try:
            result = call(self.conn, self.queue, self.consumer, **options)
        except psycopg.Error as exc:
            self.conn.rollback()
            raise QueueError(error_text(exc)) from None
        if commit:
            self.conn.commit()
        return result
