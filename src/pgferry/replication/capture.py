"""Capture and deny triggers of registered tables, through the queue layer's functions.

On a root the capture trigger writes each row change into the queue; on a subscriber the
same call with ``deny`` makes direct writes fail, while the worker (running with
``session_replication_role = replica``) still applies.
"""

from __future__ import annotations

import psycopg


def attach(conn: psycopg.Connection, queue: str, fq: str, *, deny: bool) -> None:
    conn.execute("select ferry_queue.attach_capture(%s, %s::regclass, %s)", (queue, fq, deny))


def detach(conn: psycopg.Connection, queue: str, fq: str) -> None:
    """Drop the triggers; a table that no longer exists has none left to drop."""
    row = conn.execute("select to_regclass(%s)", (fq,)).fetchone()
    if row and row[0] is not None:
        conn.execute("select ferry_queue.detach_capture(%s, %s::regclass)", (queue, fq))
