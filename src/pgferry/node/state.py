"""Writing a worker's position and health into ``ferry_node.local_state``.

The worker calls :func:`record_tick` inside the very transaction that applies a batch, so
the recorded tick is the exactly-once marker; errors and heartbeats are written in their
own short transactions so that ``status`` sees them while the worker retries.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from pgferry.errors import NodeError

# Errors are shown on one status line: keep the stored text bounded.
MAX_ERROR_LEN = 1000


def _update(conn: psycopg.Connection, query: str, params: tuple) -> None:
    cur = conn.execute(query, params)
    if cur.rowcount != 1:
        raise NodeError(f"no local state for consumer {params[-1]!r} of queue {params[-2]!r}")


def record_tick(
    conn: psycopg.Connection,
    queue: str,
    consumer: str,
    tick_id: int,
    tick_time: datetime | None = None,
) -> None:
    """Mark ``tick_id`` applied (call in the apply transaction); clears the error."""
    _update(
        conn,
        """
        update ferry_node.local_state
           set last_tick_id = %s, last_tick_time = coalesce(%s, last_tick_time),
               cur_error = null, error_time = null, last_seen = now()
         where queue_name = %s and consumer_name = %s
        """,
        (tick_id, tick_time, queue, consumer),
    )


def record_error(conn: psycopg.Connection, queue: str, consumer: str, message: str) -> None:
    """Remember the worker's current failure; shown by ``status`` as ``ERR: ...``."""
    _update(
        conn,
        """
        update ferry_node.local_state
           set cur_error = %s, error_time = now(), last_seen = now()
         where queue_name = %s and consumer_name = %s
        """,
        (message[:MAX_ERROR_LEN], queue, consumer),
    )


def clear_error(conn: psycopg.Connection, queue: str, consumer: str) -> None:
    _update(
        conn,
        """
        update ferry_node.local_state set cur_error = null, error_time = null
         where queue_name = %s and consumer_name = %s
        """,
        (queue, consumer),
    )


def heartbeat(conn: psycopg.Connection, queue: str, consumer: str) -> None:
    """The worker is alive; also acknowledges admin state changes (``uptodate``)."""
    _update(
        conn,
        """
        update ferry_node.local_state set last_seen = now(), uptodate = true
         where queue_name = %s and consumer_name = %s
        """,
        (queue, consumer),
    )
