"""The destination side of a copy, on the driver: before and after the Spark tasks run.

Before: the ``ferry_copy`` bookkeeping schema exists, the tables are emptied (TRUNCATE unless
``skip_truncate``) and their secondary indexes dropped, and their primary key and unique
constraints where that is safe (:mod:`.keys`), remembered in ``ferry_copy.saved_index``.
After: those indexes and keys are built again, the copy's rows in ``ferry_copy.range_done``
forgotten, and the tables analyzed.  While the tasks run, the rows
they recorded in ``range_done`` give the progress and, at the end, the row counts.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg import sql

from pgferry import schema
from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError
from pgferry.pipeline.copy.keys import drop_for_load, rebuild
from pgferry.pipeline.copy.plan import CopyTask
from pgferry.pipeline.tables import TableInfo


def ensure_bookkeeping(conn: psycopg.Connection) -> None:
    """Install or upgrade the ``ferry_copy`` schema (sql/copy/) on the destination.

    It stands alone (no queue or node schema needed), so any database can be a copy's or
    a repair's destination; concurrent first copies are serialised by the installer's lock.
    """
    schema.install(conn, ("copy",))


def prepare_destination(
    dst_connstr: str,
    tasks: list[CopyTask],
    dests: list[TableInfo],
    keys: list[tuple[str, ...]] | None = None,
) -> None:
    """Bookkeeping tables; then, in one transaction, TRUNCATE and drop indexes for the load.

    ``keys``: per task, the columns its copied rows are unique on (:func:`.keys.copied_key`);
    a table emptied here loses the key and unique constraints that hold them, where safe.
    """
    keys = keys or [()] * len(tasks)
    try:
        with connect(dst_connstr, autocommit=True) as conn:
            ensure_bookkeeping(conn)
            with conn.transaction():
                emptied = {
                    dst.display: (dst, key)
                    for task, dst, key in zip(tasks, dests, keys, strict=True)
                    if not task.skip_truncate
                }
                if emptied:
                    # One statement: tables of the copy may reference each other by FK.
                    idents = sql.SQL(", ").join(d.ident for d, _ in emptied.values())
                    conn.execute(sql.SQL("truncate table {}").format(idents))
                for dst, key in emptied.values():
                    drop_for_load(conn, dst, key)
    except psycopg.Error as exc:
        raise DatabaseError(f"{describe(dst_connstr)}: {error_text(exc)}") from None


def finish_destination(dst_connstr: str, dests: list[TableInfo], copy_id: str) -> None:
    """Build dropped indexes and keys again, forget this copy's bookkeeping, ANALYZE."""
    dest_names = sorted({d.display for d in dests})
    rebuild(dst_connstr, dest_names)  # each index with its record: a crash loses none
    with connect(dst_connstr, autocommit=True) as conn:
        try:
            with conn.transaction():
                conn.execute("delete from ferry_copy.range_done where copy_id = %s", (copy_id,))
                conn.execute("delete from ferry_copy.chunk where copy_id = %s", (copy_id,))
        except psycopg.Error as exc:
            raise DatabaseError(f"{describe(dst_connstr)}: {error_text(exc)}") from None
    # One connection per table: the ANALYZEs run side by side.
    unique = list({d.display: d for d in dests}.values())
    with ThreadPoolExecutor(max_workers=min(4, len(unique))) as pool:
        list(pool.map(lambda d: _analyze(dst_connstr, d), unique))


def _analyze(dst_connstr: str, dst: TableInfo) -> None:
    with connect(dst_connstr, autocommit=True) as conn:
        try:
            conn.execute(sql.SQL("analyze {}").format(dst.ident))
        except psycopg.Error as exc:
            raise DatabaseError(f"{describe(dst_connstr)}: {error_text(exc)}") from None


def done_rows(dst_connstr: str, copy_id: str) -> dict[str, int]:
    """Rows copied so far per dest_table, as the tasks recorded them."""
    with connect(dst_connstr, autocommit=True) as conn:
        rows = conn.execute(
            "select dest_table, sum(rows)::bigint from ferry_copy.range_done"
            " where copy_id = %s group by dest_table",
            (copy_id,),
        ).fetchall()
    return {table: int(count) for table, count in rows}
