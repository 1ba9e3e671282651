"""Small helpers shared by the queue tests (kept out of conftest so tests can import them)."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from pgferry import schema

Scalar = Callable[..., object]


def install_queue(connstr: str) -> str:
    with psycopg.connect(connstr) as conn:
        schema.install(conn, ("queue",))
    return connstr


def create_queue(conn: psycopg.Connection, queue: str = "q", **config: str) -> None:
    """Create ``queue`` with the given ``set_queue_config`` settings (``ticker_max_lag``:
    '0.1 s', ...), in the order given."""
    conn.execute("select ferry_queue.create_queue(%s)", (queue,))
    for key, value in config.items():
        conn.execute("select ferry_queue.set_queue_config(%s, %s, %s)", (queue, key, value))


def tick(conn: psycopg.Connection, queue: str) -> int:
    """Force one tick now and return its id."""
    conn.execute("select ferry_queue.force_tick(%s)", (queue,))
    row = conn.execute("select ferry_queue.ticker(%s)", (queue,)).fetchone()
    assert row is not None and row[0] is not None
    return row[0]


def take_batch(conn: psycopg.Connection, queue: str, consumer: str) -> list[tuple] | None:
    """Read and finish the consumer's next batch; None when no batch is ready."""
    row = conn.execute("select ferry_queue.next_batch(%s, %s)", (queue, consumer)).fetchone()
    assert row is not None
    if row[0] is None:
        return None
    events = conn.execute("select * from ferry_queue.get_batch_events(%s)", (row[0],)).fetchall()
    conn.execute("select ferry_queue.finish_batch(%s)", (row[0],))
    return events
