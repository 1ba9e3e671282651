"""Capture and deny triggers of registered tables.

On a root the queue layer's capture trigger writes each row change into the queue; on a
subscriber ``ferry.attach_deny`` makes direct writes fail (the worker, running with
``session_replication_role = replica``, still applies).  Both use the same trigger names,
so one detach removes either.
"""

from __future__ import annotations

import psycopg

from pgferry.queue import api as queue_api


def attach(conn: psycopg.Connection, queue: str, fq: str, *, deny: bool) -> None:
    if deny:
        conn.execute("select ferry.attach_deny(%s, %s::regclass)", (queue, fq))
    else:
        queue_api.attach_capture(conn, queue, fq)


def detach(conn: psycopg.Connection, queue: str, fq: str) -> None:
    """Drop the triggers; a table that no longer exists has none left to drop."""
    row = conn.execute("select to_regclass(%s)", (fq,)).fetchone()
    if row and row[0] is not None:
        queue_api.detach_capture(conn, queue, fq)
