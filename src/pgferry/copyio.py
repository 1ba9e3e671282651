"""COPY data in large chunks: the one helper that the copy job and replay read through.

:func:`copy_out` reads a ``COPY ... TO STDOUT`` straight off libpq in chunks of about
``CHUNK_BYTES``.  psycopg's ``Copy`` hands out one message per row, each through its
generator-driven wait: about 1.5 µs of the client's CPU per row, 7.4 s for the 5,000,000
rows of the copy benchmark, on a machine where the two servers need the same cores.  Here
the rows are taken with ``PQgetCopyData`` in a loop of its own, waiting on the socket only
when libpq has no complete row buffered: 2.6 s for the same rows (measured, one
connection, reading only).  The statement runs on a psycopg connection, in whatever
transaction it has open, and leaves it as psycopg's own COPY would: idle in that
transaction, or with the error raised.

:func:`gather` collects messages of other sources into such chunks;
:func:`gather_in_thread` does the same in a second thread, so reading the source and
writing the destination overlap (about 10 % faster for a copy).
"""

from __future__ import annotations

import contextlib
import queue
import select
import threading
from collections.abc import Generator, Iterable, Iterator
from typing import NoReturn

import psycopg
from psycopg import pq, sql
from psycopg.errors import error_from_result

CHUNK_BYTES = 1 << 20  # 1 MiB: few calls, little memory per stream


def gather(messages: Iterable[bytes | memoryview], size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The COPY ``messages`` joined into chunks of about ``size`` bytes (the last one less)."""
    buf = bytearray()
    for data in messages:
        buf += data
        if len(buf) >= size:
            yield bytes(buf)
            buf.clear()
    if buf:
        yield bytes(buf)


def gather_in_thread(
    messages: Iterable[bytes | memoryview], size: int = CHUNK_BYTES, depth: int = 4
) -> Iterator[bytes]:
    """:func:`gather`, run by a reader thread ``depth`` chunks ahead of the consumer.

    An error of the reader is raised in the consuming thread; an early exit of the consumer
    drains the queue so the reader never stays blocked.
    """
    chunks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=depth)

    def reader() -> None:
        try:
            for chunk in gather(messages, size):
                chunks.put(chunk)
            chunks.put(None)
        except BaseException as exc:  # handed to the consuming thread, which raises it
            chunks.put(exc)

    thread = threading.Thread(target=reader, name="pgferry-copy-reader", daemon=True)
    thread.start()
    try:
        while (item := chunks.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                chunks.get(timeout=0.1)
        thread.join()


def copy_out(
    conn: psycopg.Connection,
    statement: sql.Composable,
    size: int = CHUNK_BYTES,
    *,
    read_only: bool = False,
) -> Iterator[bytes]:
    """The data of ``statement`` (a ``COPY ... TO STDOUT``) in chunks of about ``size``.

    ``read_only`` (an idle autocommit connection): the COPY runs in a read-only
    transaction of its own, opened and committed in the same message as the statement
    (the simple query protocol takes several), one round trip where they were three.
    """
    streams = copy_out_many(conn, [statement], size, read_only=read_only)
    try:
        for chunks in streams:
            yield from chunks
    finally:
        streams.close()


def copy_out_many(
    conn: psycopg.Connection,
    statements: list[sql.Composable],
    size: int = CHUNK_BYTES,
    *,
    read_only: bool = False,
) -> Generator[Iterator[bytes], None, None]:
    """The data of each of ``statements`` (``COPY ... TO STDOUT``), all sent in one message:
    per statement, in order, an iterator of chunks of about ``size``.

    The server runs the statements back to back while the first one's data is taken: one
    round trip for them all.  A statement's chunks are read before the next statement's
    are handed out (what is left unread of them is skipped).  ``read_only``: as
    :func:`copy_out`, one read-only transaction around them all.  An error stops the rest
    and is raised where it is met; the connection is left as :func:`copy_out` leaves it.
    """
    pgconn = conn.pgconn
    texts = [statement.as_bytes(conn) for statement in statements]
    if read_only:
        texts = [b"begin transaction read only", *texts, b"commit"]
    pgconn.send_query(b"; ".join(texts))
    reading = _Reading(pgconn, conn.info.encoding, read_only, len(statements))
    try:
        for _ in statements:
            reading.start_copy()
            yield reading.chunks(size)
            reading.skip_rest()
        reading.end()
    finally:
        if not reading.idle:  # stopped before the end
            reading.abandon(conn)


class _Reading:
    """The results of one message of COPY statements, taken in order off libpq."""

    def __init__(
        self, pgconn: pq.abc.PGconn, encoding: str, read_only: bool, statements: int
    ) -> None:
        self.pgconn, self.encoding, self.read_only = pgconn, encoding, read_only
        self.poll = select.poll()
        self.poll.register(pgconn.socket, select.POLLIN)
        self.idle = False  # every result of the message read
        self.copying = False  # a statement's data is being read
        self.left = statements  # statements whose data has not been read to its end

    def start_copy(self) -> None:
        """Up to the next statement's COPY data (past the results of BEGIN and of the
        statement before)."""
        started = _next_result(self.pgconn, self.poll)
        while started is not None and started.status == pq.ExecStatus.COMMAND_OK:
            started = _next_result(self.pgconn, self.poll)
        if started is None or started.status != pq.ExecStatus.COPY_OUT:
            self._fail(_error(self.pgconn, started, self.encoding))
        self.copying = True

    def chunks(self, size: int) -> Iterator[bytes]:
        """The current statement's data; raises its error, if it ends with one, before the
        last chunk."""
        buf = bytearray()
        for data in self._messages():
            buf += data
            if len(buf) >= size:
                yield bytes(buf)
                buf.clear()
        self._statement_result()
        if buf:
            yield bytes(buf)

    def skip_rest(self) -> None:
        if self.copying:
            for _ in self._messages():
                pass
            self._statement_result()

    def abandon(self, conn: psycopg.Connection) -> None:
        """The reader stopped before the end: cancel what may still run, read what is left
        of the message, and end the transaction it opened (``read_only``)."""
        with contextlib.suppress(Exception):
            if self.copying or self.left:  # else only the COMMIT's result is left
                conn.cancel_safe(timeout=5)
            while True:
                for _ in self._messages():
                    pass
                result = _next_result(self.pgconn, self.poll)
                if result is None:
                    break
                self.copying = result.status == pq.ExecStatus.COPY_OUT
            if self.read_only:
                _roll_back(self.pgconn, self.poll)
        self.idle = True

    def end(self) -> None:
        """The results after the last statement's (COMMIT's): an error is raised."""
        if self.idle:
            return
        error = None
        while (result := _next_result(self.pgconn, self.poll)) is not None:
            if result.status != pq.ExecStatus.COMMAND_OK and error is None:
                error = error_from_result(result, self.encoding)
        self.idle = True
        if error is not None:
            self._fail(error)

    def _messages(self) -> Iterator[bytes | memoryview]:
        get = self.pgconn.get_copy_data
        while self.copying:
            nbytes, data = get(1)
            if nbytes > 0:
                yield data
            elif nbytes == 0:  # no whole row buffered: wait for the socket
                self.poll.poll()
                self.pgconn.consume_input()
            else:  # -1: the data is over (a server error is in the result read next)
                self.copying = False

    def _statement_result(self) -> None:
        result = _next_result(self.pgconn, self.poll)
        if result is not None and result.status != pq.ExecStatus.COMMAND_OK:
            self._fail(error_from_result(result, self.encoding))
        self.left -= 1
        if not self.left:
            # The last statement's data is read: the COMMIT's result too, at once, so that
            # a reader done with the data leaves the connection idle, asking for no more.
            self.end()

    def _fail(self, error: psycopg.Error) -> NoReturn:
        """Read the message's remaining results (the server skipped the rest), end the
        aborted transaction the message opened, and raise ``error``."""
        self.copying = False
        while _next_result(self.pgconn, self.poll) is not None:
            pass
        _roll_back(self.pgconn, self.poll)
        self.idle = True
        raise error


def _roll_back(pgconn: pq.abc.PGconn, poll: select.poll) -> None:
    """A failed statement of the message skipped its COMMIT: end the aborted transaction
    it left open (psycopg did not open it and would not)."""
    if pgconn.transaction_status == pq.TransactionStatus.INERROR:
        pgconn.send_query(b"rollback")
        while _next_result(pgconn, poll) is not None:
            pass


def _wait_result(pgconn: pq.abc.PGconn, poll: select.poll) -> None:
    """Until a result can be read without blocking (the query sent, the answer in)."""
    while pgconn.flush():  # a non-blocking connection: the socket took part of it
        select.select([], [pgconn.socket], [])
    pgconn.consume_input()
    while pgconn.is_busy():
        poll.poll()
        pgconn.consume_input()


def _next_result(pgconn: pq.abc.PGconn, poll: select.poll) -> pq.abc.PGresult | None:
    _wait_result(pgconn, poll)
    return pgconn.get_result()


def _error(pgconn: pq.abc.PGconn, result: pq.abc.PGresult | None, encoding: str) -> psycopg.Error:
    if result is not None and result.status == pq.ExecStatus.FATAL_ERROR:
        return error_from_result(result, encoding)
    return psycopg.ProgrammingError(
        pgconn.get_error_message(encoding) or "the statement is not a COPY TO STDOUT"
    )
