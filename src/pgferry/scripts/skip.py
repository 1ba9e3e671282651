"""Skipping an event that a node cannot apply (``skip-event``).

When a queued script fails on a node, the worker keeps its position, records the error and
the failing event (``ferry.failed_event``) and retries.  The operator either fixes the cause
or skips the event: the decision is recorded in ``ferry.skipped_event`` and replay passes
over that one event while the rest of its batch is still applied.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row

from pgferry.errors import PgferryError
from pgferry.node import model


@dataclass(frozen=True)
class FailedEvent:
    queue_name: str
    consumer_name: str
    tick_id: int
    ev_id: int
    ev_type: str
    ev_extra1: str | None
    error: str

    def describe(self) -> str:
        what = f"{self.ev_type} {self.ev_extra1}" if self.ev_extra1 else self.ev_type
        return f"event {self.ev_id} of the batch ending at tick {self.tick_id}: {what}"


class EventFailed(PgferryError):
    """One event could not be applied; carries what ``skip-event`` needs to name it."""

    def __init__(self, event: FailedEvent) -> None:
        super().__init__(f"{event.describe()}: {event.error}")
        self.event = event


def record_failure(conn: psycopg.Connection, event: FailedEvent) -> None:
    conn.execute(
        """
        insert into ferry.failed_event
            (queue_name, consumer_name, tick_id, ev_id, ev_type, ev_extra1, error)
        values (%s, %s, %s, %s, %s, %s, %s)
        on conflict (queue_name, consumer_name) do update
            set tick_id = excluded.tick_id, ev_id = excluded.ev_id,
                ev_type = excluded.ev_type, ev_extra1 = excluded.ev_extra1,
                error = excluded.error, failed_at = now()
        """,
        (
            event.queue_name,
            event.consumer_name,
            event.tick_id,
            event.ev_id,
            event.ev_type,
            event.ev_extra1,
            event.error,
        ),  # fmt: skip
    )


def clear_failure(conn: psycopg.Connection, queue: str, consumer: str) -> None:
    conn.execute(
        "delete from ferry.failed_event where queue_name = %s and consumer_name = %s",
        (queue, consumer),
    )


def pending_failure(conn: psycopg.Connection, queue: str, consumer: str) -> FailedEvent | None:
    with conn.cursor(row_factory=class_row(FailedEvent)) as cur:
        cur.execute(
            """
            select queue_name, consumer_name, tick_id, ev_id, ev_type, ev_extra1, error
              from ferry.failed_event where queue_name = %s and consumer_name = %s
            """,
            (queue, consumer),
        )
        return cur.fetchone()


def mark_skipped(conn: psycopg.Connection, event: FailedEvent, ev_data: str | None) -> None:
    """Record the operator's decision and clear the failure (caller's transaction)."""
    conn.execute(
        """
        insert into ferry.skipped_event
            (queue_name, tick_id, ev_id, ev_type, ev_extra1, ev_data, error)
        values (%s, %s, %s, %s, %s, %s, %s) on conflict do nothing
        """,
        (
            event.queue_name,
            event.tick_id,
            event.ev_id,
            event.ev_type,
            event.ev_extra1,
            ev_data,
            event.error,
        ),  # fmt: skip
    )
    clear_failure(conn, event.queue_name, event.consumer_name)
    model.clear_error(conn, event.queue_name, event.consumer_name)


def is_skipped(conn: psycopg.Connection, queue: str, tick_id: int, ev_id: int) -> bool:
    row = conn.execute(
        "select 1 from ferry.skipped_event where queue_name = %s and tick_id = %s and ev_id = %s",
        (queue, tick_id, ev_id),
    ).fetchone()
    return row is not None
