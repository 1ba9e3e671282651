"""COPY data in large chunks: the one helper that the copy job and replay read through.

A ``COPY ... TO STDOUT`` yields one message per row; writing each into the destination's
``COPY FROM STDIN`` costs a call per row.  :func:`gather` collects the messages into chunks
of about ``CHUNK_BYTES``; :func:`gather_in_thread` does the same in a second thread, so
reading the source and writing the destination overlap (about 10 % faster for a copy).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable, Iterator

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
