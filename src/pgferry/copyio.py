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
from collections.abc import Iterable, Iterator

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
    pgconn = conn.pgconn
    encoding = conn.info.encoding
    text = statement.as_bytes(conn)
    if read_only:
        text = b"begin transaction read only; " + text + b"; commit"
    pgconn.send_query(text)
    poll = select.poll()
    poll.register(pgconn.socket, select.POLLIN)
    started = _next_result(pgconn, poll)
    while read_only and started is not None and started.status == pq.ExecStatus.COMMAND_OK:
        started = _next_result(pgconn, poll)  # the BEGIN's
    if started is None or started.status != pq.ExecStatus.COPY_OUT:
        error = _error(pgconn, started, encoding)
        while _next_result(pgconn, poll) is not None:  # idle again, the error raised
            pass
        _roll_back(pgconn, poll)
        raise error
    done = False
    try:
        buf = bytearray()
        get = pgconn.get_copy_data
        while True:
            nbytes, data = get(1)
            if nbytes > 0:
                buf += data
                if len(buf) >= size:
                    yield bytes(buf)
                    buf.clear()
            elif nbytes == 0:  # no whole row buffered: wait for the socket
                poll.poll()
                pgconn.consume_input()
            else:  # -1: the data is over (a server error is in the result read next)
                break
        done = True
        error = None
        while (result := _next_result(pgconn, poll)) is not None:
            if result.status != pq.ExecStatus.COMMAND_OK and error is None:
                error = error_from_result(result, encoding)
        if error is not None:
            _roll_back(pgconn, poll)
            raise error
        if buf:
            yield bytes(buf)
    finally:
        if not done:  # stopped before the end: cancel, and read what is left of it
            with contextlib.suppress(Exception):
                conn.cancel_safe(timeout=5)
                _finish(pgconn, poll)
                if read_only:
                    _roll_back(pgconn, poll)


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


def _finish(pgconn: pq.abc.PGconn, poll: select.poll) -> None:
    """Read what a COPY left until the connection is idle again."""
    while True:
        nbytes, _ = pgconn.get_copy_data(1)
        if nbytes == 0:
            poll.poll()
            pgconn.consume_input()
        elif nbytes < 0:
            break
    while _next_result(pgconn, poll) is not None:
        pass


def _next_result(pgconn: pq.abc.PGconn, poll: select.poll) -> pq.abc.PGresult | None:
    _wait_result(pgconn, poll)
    return pgconn.get_result()


def _error(pgconn: pq.abc.PGconn, result: pq.abc.PGresult | None, encoding: str) -> psycopg.Error:
    if result is not None and result.status == pq.ExecStatus.FATAL_ERROR:
        return error_from_result(result, encoding)
    return psycopg.ProgrammingError(
        pgconn.get_error_message(encoding) or "the statement is not a COPY TO STDOUT"
    )
