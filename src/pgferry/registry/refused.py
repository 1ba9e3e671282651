"""Captured DDL a subscriber refused to run: the rows of ``ferry.refused_event``.

Replay notes each refused event in its applying transaction
(:mod:`pgferry.scripts.ddl_check` decides what is refused); ``status`` and the worker's
metrics show how many there are and the last one.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row


def record(
    conn: psycopg.Connection,
    queue: str,
    tick_id: int,
    ev_id: int,
    file_name: str,
    text: str,
    reason: str,
) -> None:
    """Note a refused event in the caller's (applying) transaction."""
    conn.execute(
        """
        insert into ferry.refused_event (queue_name, tick_id, ev_id, ev_extra1, ev_data, reason)
        values (%s, %s, %s, %s, %s, %s) on conflict do nothing
        """,
        (queue, tick_id, ev_id, file_name, text, reason),
    )


@dataclass(frozen=True)
class Refused:
    """How many events of a queue were refused here, and the last one as one line."""

    count: int
    last: str  # "event ID (NAME): REASON"


def refused(conn: psycopg.Connection, queue: str) -> Refused | None:
    """The refused events of ``queue``; None when there is none."""
    with conn.cursor(row_factory=class_row(Refused)) as cur:
        cur.execute(
            """
            select count(*) over () as count,
                   format('event %%s (%%s): %%s', ev_id, ev_extra1, reason) as last
              from ferry.refused_event where queue_name = %s
             order by refused_at desc, ev_id desc limit 1
            """,
            (queue,),
        )
        return cur.fetchone()
