"""The consumer side of the provider's queue, as the replication worker uses it.

Thin wrappers over the ``ferry_queue`` functions (next batch, its ticks and snapshots, the
event query, finish), so the worker speaks in named calls and a change of the queue layer's
SQL surface touches only this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg


@dataclass(frozen=True)
class Batch:
    batch_id: int
    prev_tick_id: int | None
    tick_id: int
    tick_time: datetime | None
    prev_event_seq: int | None
    event_seq: int | None
    tick_snapshot: str | None  # snapshot of the closing tick (text form)


def next_batch(
    conn: psycopg.Connection,
    queue: str,
    consumer: str,
    *,
    behind: bool,
    min_count: int,
) -> int | None:
    """Next batch id; a consumer that is behind asks for one batch spanning several ticks."""
    if behind:
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


def last_tick(conn: psycopg.Connection, queue: str) -> int | None:
    row = conn.execute(
        "select last_tick_id from ferry_queue.get_queue_info(%s)", (queue,)
    ).fetchone()
    return None if row is None else row[0]


def insert_event(
    conn: psycopg.Connection, queue: str, ev_type: str, data: str | None, extra1: str | None
) -> None:
    conn.execute(
        "select ferry_queue.insert_event(%s, %s, %s, %s, null, null, null)",
        (queue, ev_type, data, extra1),
    )
