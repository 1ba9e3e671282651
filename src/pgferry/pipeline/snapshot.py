"""Exported snapshots: one logical point in time shared by many Spark tasks.

The driver opens a REPEATABLE READ transaction and exports its snapshot; every task imports it
with ``SET TRANSACTION SNAPSHOT`` and so sees exactly the same data.  The exporting transaction
must stay open until every task has imported the snapshot, so the handle is a context manager
that the driver keeps open for the whole job.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import IsolationLevel, sql

from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError


@dataclass(frozen=True)
class ExportedSnapshot:
    snapshot_id: str  # pg_export_snapshot(): what tasks import
    txid_snapshot: str  # pg_current_snapshot()::text: what replay uses for the hand-over


@contextmanager
def exported_snapshot(connstr: str) -> Iterator[ExportedSnapshot]:
    """Hold a REPEATABLE READ transaction open and yield its exported snapshot."""
    conn = connect(connstr)
    try:
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        row = conn.execute("select pg_export_snapshot(), pg_current_snapshot()::text").fetchone()
        assert row is not None
        yield ExportedSnapshot(row[0], row[1])
    except psycopg.Error as exc:
        raise DatabaseError(f"{describe(connstr)}: {error_text(exc)}") from None
    finally:
        conn.close()


@contextmanager
def maybe_snapshot(connstr: str, snapshot_id: str | None) -> Iterator[str]:
    """Use the caller's snapshot when given, else export one for the duration of the block."""
    if snapshot_id is not None:
        yield snapshot_id
        return
    with exported_snapshot(connstr) as snap:
        yield snap.snapshot_id


def open_in_snapshot(connstr: str, snapshot_id: str) -> psycopg.Connection:
    """A read-only connection whose transaction sees exactly ``snapshot_id``."""
    conn = connect(connstr)
    conn.isolation_level = IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    try:
        conn.execute(sql.SQL("set transaction snapshot {}").format(sql.Literal(snapshot_id)))
    except psycopg.Error as exc:
        conn.close()
        raise DatabaseError(
            f"{describe(connstr)}: cannot import snapshot {snapshot_id}: {error_text(exc)}"
        ) from None
    return conn
