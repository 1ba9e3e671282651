"""The few queue-layer (``ferry_queue``) calls the node commands make.

Kept in one place so the node code speaks to the queue layer through named Python
functions instead of scattering SQL calls across the set-up and status code.
"""

from __future__ import annotations

from datetime import datetime

import psycopg


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
