"""Every call pgferry's Python code makes into the queue layer (``ferry_queue``).

Named functions over the SQL API (queues, consumers, ticks, batches, events), so the node,
apply and script code speak to the queue in Python and a change of the queue's SQL surface
touches only this file.  :class:`Batch` is the one description of an open batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from pgferry.errors import QueueError


@dataclass(frozen=True)
class Batch:
    batch_id: int
    prev_tick_id: int | None
    tick_id: int
    tick_time: datetime | None
    prev_event_seq: int | None
    event_seq: int | None
    tick_snapshot: str | None  # snapshot of the closing tick (text form)


def pending(conn: psycopg.Connection, queue: str, last_tick: int | None) -> tuple[int, int]:
    """(ticks, events) made after ``last_tick`` on the provider."""
    if last_tick is None:
        return 0, 0
    row = conn.execute(
        """
        select count(*) - 1, coalesce(max(t.tick_event_seq) - min(t.tick_event_seq), 0)
          from ferry_queue.tick t join ferry_queue.queue q on q.queue_id = t.tick_queue
         where q.queue_name = %s and t.tick_id >= %s
        """,
        (queue, last_tick),
    ).fetchone()
    return (0, 0) if row is None else (max(row[0], 0), row[1])


def next_batch(
    conn: psycopg.Connection,
    queue: str,
    consumer: str,
    *,
    min_count: int | None,
) -> int | None:
    """Next batch id; with ``min_count`` one batch spanning ticks up to that many events.

    A consumer that is behind takes one large batch: a batch costs a fixed price (a Spark
    job, a transaction), and events of one key collapse within it.
    """
    if min_count:
        row = conn.execute(
            "select ferry_queue.next_batch_custom(%s, %s, null, %s, null)",
            (queue, consumer, min_count),
        ).fetchone()
        if row and row[0] is not None:
            return row[0]
    row = conn.execute("select ferry_queue.next_batch(%s, %s)", (queue, consumer)).fetchone()
    return None if row is None else row[0]


def batch_info(conn: psycopg.Connection, batch_id: int) -> Batch:
    row = conn.execute(
        """
        select prev_tick_id, tick_id, batch_end, seq_start, seq_end, snapshot
          from ferry_queue.get_batch_info(%s)
        """,
        (batch_id,),
    ).fetchone()
    assert row is not None
    return Batch(batch_id, row[0], row[1], row[2], row[3], row[4], row[5])


def batch_event_sql(conn: psycopg.Connection, batch_id: int) -> str:
    row = conn.execute("select ferry_queue.batch_event_sql(%s)", (batch_id,)).fetchone()
    assert row is not None
    return row[0]


def finish_batch(conn: psycopg.Connection, batch_id: int) -> None:
    conn.execute("select ferry_queue.finish_batch(%s)", (batch_id,))


def rewind(conn: psycopg.Connection, queue: str, consumer: str, tick: int) -> int:
    """Move ``consumer`` back (or on) to ``tick``, provided the queue still holds that tick
    and every event after it; returns the position it had.  QueueError when it does not."""
    try:
        with conn.transaction():
            row = conn.execute(
                "select ferry_queue.rewind_consumer(%s, %s, %s)", (queue, consumer, tick)
            ).fetchone()
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise QueueError(str(exc.diag.message_primary)) from None
    assert row is not None
    return row[0]


def register_at(conn: psycopg.Connection, queue: str, consumer: str, tick: int) -> None:
    """Place ``consumer`` at ``tick`` whatever its position (the operator asked for it)."""
    conn.execute("select ferry_queue.register_consumer_at(%s, %s, %s)", (queue, consumer, tick))


def insert_event(
    conn: psycopg.Connection, queue: str, ev_type: str, data: str | None, extra1: str | None
) -> None:
    conn.execute(
        "select ferry_queue.insert_event(%s, %s, %s, %s, null, null, null)",
        (queue, ev_type, data, extra1),
    )


def scripts(conn: psycopg.Connection, batch_sql: str) -> list[tuple]:
    """The batch's queued scripts (EXECUTE events) in order: barriers for replay.

    Rows: (ev_id, ev_data, ev_extra1, ev_extra2, ev_extra4).
    """
    query = (
        "select ev_id, ev_data, ev_extra1, ev_extra2, ev_extra4 from ("
        + batch_sql
        + ") e where e.ev_type = 'EXECUTE' order by e.ev_id"
    )
    return conn.execute(query.encode()).fetchall()


# --- queues and consumers (node set-up, status) -----------------------------------------
def create_queue(conn: psycopg.Connection, queue: str) -> None:
    conn.execute("select ferry_queue.create_queue(%s)", (queue,))


def queue_exists(conn: psycopg.Connection, queue: str) -> bool:
    row = conn.execute(
        "select exists (select 1 from ferry_queue.queue where queue_name = %s)", (queue,)
    ).fetchone()
    return bool(row and row[0])


def set_external_ticker(conn: psycopg.Connection, queue: str) -> None:
    """A branch's queue is ticked by its worker, mirroring the provider's ticks."""
    conn.execute("select ferry_queue.set_queue_config(%s, 'external_ticker', 'true')", (queue,))


def register_consumer(conn: psycopg.Connection, queue: str, consumer: str) -> None:
    conn.execute("select ferry_queue.register_consumer(%s, %s)", (queue, consumer))


def unregister_consumer(conn: psycopg.Connection, queue: str, consumer: str) -> None:
    conn.execute("select ferry_queue.unregister_consumer(%s, %s)", (queue, consumer))


def consumer_last_tick(
    conn: psycopg.Connection, queue: str, consumer: str
) -> tuple[int | None, datetime | None]:
    """Id and time of the tick a consumer has completed (where its next batch starts)."""
    row = conn.execute(
        "select last_tick, now() - lag from ferry_queue.get_consumer_info(%s, %s)",
        (queue, consumer),
    ).fetchone()
    return (None, None) if row is None else (row[0], row[1])


def last_tick(conn: psycopg.Connection, queue: str) -> tuple[int | None, datetime | None]:
    """Id and time of the newest tick of ``queue``."""
    row = conn.execute(
        "select last_tick_id, now() - ticker_lag from ferry_queue.get_queue_info(%s)", (queue,)
    ).fetchone()
    return (None, None) if row is None else (row[0], row[1])
