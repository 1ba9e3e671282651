"""Reading the table parts of a planned segment from the provider, ahead of the apply.

A part (one table, or one ev_id range of it: any :class:`Part`, in replay a
:class:`~pgferry.apply.replay.plan.TableWork`) is read in one of three ways, each an object with
the same small interface (:class:`PartReads`, whose ``parts`` hands the applier each part
with its COPY data), chosen per segment by :mod:`pgferry.apply.replay.ways`:

* inline (:class:`InlineReads`), on the worker's own provider connection, while the part
  is loaded (small segments: a thread costs more than it saves), every part's COPY sent in
  one message (:func:`pgferry.apply.replay.read.read_many`: one round trip for all of them);
* by reader threads of a :class:`ReaderPool`, each on a provider connection of a
  :class:`psycopg_pool.ConnectionPool` kept between batches, ahead of the apply: while the
  subscriber applies one table, the next ones are being read;
* by Spark tasks, one per part (a :class:`ReaderPool` that
  :mod:`pgferry.apply.replay.spark_session` makes submits them from the same reader threads);
  each task runs :func:`pgferry.apply.replay.read.read_part` on an executor.

Reads may be started before the applier asks for them (:meth:`ReaderPool.start_ahead`:
the next batch's, :mod:`pgferry.apply.replay.prefetch`); the applier's :meth:`ReaderPool.stream`
of the very same queries takes them over.  Every read is a COPY in a read-only
transaction (:func:`pgferry.apply.replay.read.read_chunks`).
:meth:`ReaderPool.parts` hands the parts to the applier in the order their reads become
ready, the ranges of one table in their own order (:meth:`ReaderPool.split_parts`: as two
streams, for two applying connections).  The parts come from the plan; this module
knows of them only what :class:`Part` says.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar, cast

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from pgferry.apply.replay.batch_sql import Segment
from pgferry.apply.replay.read import (
    APPLICATION_NAME,
    ReplayError,
    read_chunks,
    read_many,
    set_text_format,
)
from pgferry.db import connect, describe, error_text, session_conninfo
from pgferry.errors import DatabaseError

# Chunks a reader may hold before it waits for the apply (bounds memory per table).
QUEUED_CHUNKS = 64

# Seconds a reader thread waits for a pool connection.  The pool never has fewer slots than
# reader threads, so this is only the time to connect (connect_timeout, and a retry).
READER_CONNECT_WAIT = 15.0
# Seconds an unused reader connection is kept: reconnecting costs milliseconds, far less
# than a batch that needs readers; an idle worker does not hold provider backends forever.
READER_MAX_IDLE = 600.0

# The pool logs every request at INFO: a line per table read.  Only its warnings (failed
# connections) belong in the worker's log, unless logging was set up for it already.
_pool_log = logging.getLogger("psycopg.pool")
if _pool_log.level == logging.NOTSET:
    _pool_log.setLevel(logging.WARNING)


class _Stream:
    """Chunks of one table handed from a reader thread to the applying thread.

    ``ready`` tells the applier the stream can be consumed without waiting for its
    reader: it is complete (or failed), or its queue is full.
    """

    _END = object()

    def __init__(self, wakeup: threading.Condition) -> None:
        self.q: queue.Queue[object] = queue.Queue(maxsize=QUEUED_CHUNKS)
        self.cancelled = threading.Event()
        self.ready = False
        self._wakeup = wakeup

    def _mark_ready(self) -> None:
        with self._wakeup:
            self.ready = True
            self._wakeup.notify_all()

    def put(self, item: object) -> bool:
        final = item is self._END or isinstance(item, BaseException)
        while not self.cancelled.is_set():
            try:
                self.q.put(item, timeout=0.2)
                if final:
                    self._mark_ready()
                return True
            except queue.Full:
                self._mark_ready()
        return False

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                item = self.q.get(timeout=0.2)
            except queue.Empty:
                # Stopped while its reader had nothing queued: a consumer on another
                # thread (the second apply connection's) must not wait forever.
                if self.cancelled.is_set():
                    raise ReplayError("read stopped") from None
                continue
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield cast(bytes, item)  # the rest are chunks of COPY data


def next_ready(streams: list[_Stream], wakeup: threading.Condition) -> int:
    """Index of the first stream that is ready, waiting for one if none is yet."""
    with wakeup:
        while True:
            for i, stream in enumerate(streams):
                if stream.ready:
                    return i
            wakeup.wait(timeout=1.0)


# A started read: its streams, the condition that signals a ready one, and its stop.
_Started = tuple[list[_Stream], threading.Condition, Callable[[], None]]

# Reads one query's COPY data somewhere else than on a pool connection (a Spark task).
RemoteRead = Callable[[str, bool], Iterable[bytes]]


def _reader_conninfo(dsn: str) -> str:
    """``dsn`` with what :func:`pgferry.db.connect` adds to every connection."""
    return session_conninfo(dsn, APPLICATION_NAME)


class Part(Protocol):
    """What a reader needs of one part to read: its query, its table (parts of one table
    are applied in their order) and whether its COPY is binary."""

    @property
    def table_name(self) -> str: ...

    @property
    def binary(self) -> bool: ...

    def query(self, batch_sql: str, segment: Segment) -> str: ...


P = TypeVar("P", bound=Part)


class PartReads(Protocol):
    """How a segment's parts are read, chosen per segment (:mod:`.ways`): inline
    (:class:`InlineReads`), by reader threads or by Spark tasks (:class:`ReaderPool`)."""

    def parts(
        self, works: list[P], batch_sql: str, segment: Segment
    ) -> contextlib.AbstractContextManager[Iterator[tuple[P, Iterable[bytes]]]]:
        """The parts of ``works`` with their COPY data, in the order to apply them; reads
        still running when the block exits are stopped."""
        ...


class InlineReads:
    """Parts read on the worker's own provider connection while they are applied, in the
    listed order (small segments: a thread costs more than it saves), every part's COPY
    in one message: one round trip for all of a small batch's tables."""

    def __init__(self, provider: psycopg.Connection) -> None:
        self.provider = provider

    @contextlib.contextmanager
    def parts(
        self, works: list[P], batch_sql: str, segment: Segment
    ) -> Iterator[Iterator[tuple[P, Iterable[bytes]]]]:
        streams = read_many(self.provider, [(w.query(batch_sql, segment), w.binary) for w in works])
        try:
            yield _in_order(works, streams)
        finally:
            streams.close()


class ReaderPool:
    """Threads that read table queries ahead of the apply.

    Each thread reads on a connection of the pool's :class:`ConnectionPool` (autocommit,
    :data:`TEXT_FORMAT`), kept between batches: a connection per batch would cost more than
    a small batch does.  With ``remote`` each query is read by one Spark task instead and no
    connection is made.  :meth:`close` when the worker disconnects.
    """

    def __init__(self, dsn: str, size: int, remote: RemoteRead | None = None) -> None:
        self.dsn = dsn
        self.size = max(1, size)
        self.remote = remote
        self._conns: ConnectionPool | None = None
        self._running = 0  # reader threads at work, over every stream() call
        self._ahead: tuple[list[tuple[str, str, bool]], _Started] | None = None
        self._idle = threading.Condition()
        if remote is None:
            # Made on demand, at most one per reader thread (as many as ``size``).
            self._conns = ConnectionPool(
                _reader_conninfo(dsn),
                kwargs={"autocommit": True},
                min_size=0,
                max_size=self.size,
                configure=set_text_format,
                max_idle=READER_MAX_IDLE,
                name=APPLICATION_NAME,
                open=True,
            )

    def _take(self) -> psycopg.Connection:
        assert self._conns is not None
        try:
            return self._conns.getconn(timeout=READER_CONNECT_WAIT)
        except PoolTimeout:
            # The pool retries quietly; one direct attempt names the reason.
            connect(self.dsn, application_name=APPLICATION_NAME).close()
            raise DatabaseError(
                f"cannot connect to {describe(self.dsn)}: no reader connection"
                f" within {READER_CONNECT_WAIT:g} s"
            ) from None

    def _give(self, conn: psycopg.Connection, broken: bool = False) -> None:
        assert self._conns is not None
        status = conn.info.transaction_status
        if broken or status != psycopg.pq.TransactionStatus.IDLE:
            # Cut off in a COPY or a transaction: not worth bringing back; the pool drops it.
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self._conns.putconn(conn)

    def start_ahead(self, works: list[P], batch_sql: str, segment: Segment) -> None:
        """Start reading the parts of ``works`` now, for a later :meth:`parts` (or
        :meth:`stream`) of the very same queries: the next batch's parts, read while this
        one is applied, or this segment's before the next batch's are."""
        queries = [(w.table_name, w.query(batch_sql, segment), w.binary) for w in works]
        self.drop_ahead()
        self._ahead = (queries, self._start(queries))

    def has_ahead(self) -> bool:
        """Reads started ahead that no :meth:`stream` took yet."""
        return self._ahead is not None

    def drop_ahead(self) -> None:
        """Stop the reads :meth:`start_ahead` started, if no :meth:`stream` took them."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead[1][2]()

    def stream(self, queries: Sequence[tuple[str, str, bool]]) -> _Started:
        """Start reading ``(label, query, binary)`` in order; returns their streams, the
        condition that signals a ready stream, and a function that stops what still runs.
        Reads started ahead for exactly these queries are handed over instead; others
        started ahead are stopped."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            if ahead[0] == list(queries):
                return ahead[1]
            ahead[1][2]()
        return self._start(queries)

    def _start(self, queries: Sequence[tuple[str, str, bool]]) -> _Started:
        wakeup = threading.Condition()
        streams = [_Stream(wakeup) for _ in queries]
        order: queue.Queue[int] = queue.Queue()
        for i in range(len(queries)):
            order.put(i)

        running: dict[int, psycopg.Connection] = {}

        def run() -> None:
            while True:
                try:
                    i = order.get_nowait()
                except queue.Empty:
                    return
                stream = streams[i]
                if stream.cancelled.is_set():
                    continue
                label, query, binary = queries[i]
                conn = None
                try:
                    if self.remote is not None:
                        chunks = self.remote(query, binary)
                    else:
                        conn = self._take()
                        running[i] = conn
                        chunks = read_chunks(conn, query, binary)
                    for chunk in chunks:
                        if not stream.put(chunk):
                            break
                    else:
                        stream.put(_Stream._END)
                except Exception as exc:  # noqa: BLE001 - handed to the applying thread
                    msg = error_text(exc) if isinstance(exc, psycopg.Error) else str(exc)
                    stream.put(ReplayError(f"reading {label}: {msg}"))
                finally:
                    running.pop(i, None)
                    if conn is not None:
                        self._give(conn, broken=stream.cancelled.is_set())

        def run_counted() -> None:
            try:
                run()
            finally:
                with self._idle:
                    self._running -= 1
                    self._idle.notify_all()

        threads = [
            threading.Thread(target=run_counted, name="pgferry-read", daemon=True)
            for _ in range(min(self.size, len(queries)))
        ]
        with self._idle:
            self._running += len(threads)
        for t in threads:
            t.start()

        def stop() -> None:
            for s in streams:
                s.cancelled.set()
            for conn in list(running.values()):
                with contextlib.suppress(psycopg.Error):
                    conn.cancel_safe(timeout=5)
            for t in threads:
                t.join()

        return streams, wakeup, stop

    @contextlib.contextmanager
    def parts(
        self, works: list[P], batch_sql: str, segment: Segment
    ) -> Iterator[Iterator[tuple[P, Iterable[bytes]]]]:
        """:meth:`PartReads.parts`: the tables in the order their reads become ready, the
        ranges of one table in their own order."""
        read, wakeup, stop = self.stream(
            [(w.table_name, w.query(batch_sql, segment), w.binary) for w in works]
        )
        try:
            yield _ready_first(list(zip(works, read, strict=True)), wakeup)
        finally:
            stop()

    @contextlib.contextmanager
    def split_parts(
        self, works: list[P], batch_sql: str, segment: Segment, second: frozenset[str]
    ) -> Iterator[tuple[Iterator[tuple[P, Iterable[bytes]]], Iterator[tuple[P, Iterable[bytes]]]]]:
        """:meth:`parts` as two streams of parts to apply on two connections at once: the
        tables named in ``second``, and the others.  Each stream gives its tables in the
        order their reads become ready."""
        streams, wakeup, stop = self.stream(
            [(w.table_name, w.query(batch_sql, segment), w.binary) for w in works]
        )
        pairs = list(zip(works, streams, strict=True))
        try:
            yield (
                _ready_first([p for p in pairs if p[0].table_name not in second], wakeup),
                _ready_first([p for p in pairs if p[0].table_name in second], wakeup),
            )
        finally:
            stop()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no reader thread of this pool is at work (every query read, or
        stopped); False when ``timeout`` seconds passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._running == 0, timeout)

    def close(self) -> None:
        self.drop_ahead()
        if self._conns is not None:
            self._conns.close()
            self._conns = None


def _in_order(
    works: list[P], streams: Iterator[Iterable[bytes]]
) -> Iterator[tuple[P, Iterable[bytes]]]:
    for work in works:
        yield work, next(streams)
    next(streams, None)  # the end of the reads' message (its COMMIT)


def _ready_first(
    pending: list[tuple[P, _Stream]], wakeup: threading.Condition
) -> Iterator[tuple[P, Iterable[bytes]]]:
    # Tables in the order their reads become ready, not the listed one; the ranges of one
    # table in their own order.
    while pending:
        heads = []
        seen: set[str] = set()
        for i, (work, _stream) in enumerate(pending):
            if work.table_name not in seen:
                heads.append(i)
                seen.add(work.table_name)
        pick = heads[next_ready([pending[i][1] for i in heads], wakeup)]
        yield pending.pop(pick)
