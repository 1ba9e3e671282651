"""The destination side of a copy, on the driver: before and after the Spark tasks run.

Before: the ``ferry_copy`` bookkeeping schema exists, the tables are emptied (TRUNCATE unless
``skip_truncate``) and their secondary indexes dropped, remembered in
``ferry_copy.saved_index``.  After: those indexes are rebuilt, the copy's rows in
``ferry_copy.range_done`` forgotten, and the tables analyzed.  While the tasks run, the rows
they recorded in ``range_done`` give the progress and, at the end, the row counts.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg import sql

from pgferry import schema
from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError
from pgferry.pipeline.copy.plan import CopyTask
from pgferry.pipeline.tables import TableInfo

log = logging.getLogger(__name__)


def ensure_bookkeeping(conn: psycopg.Connection) -> None:
    """Install or upgrade the ``ferry_copy`` schema (sql/copy/) on the destination.

    It stands alone (no queue or node schema needed), so any database can be a copy's or
    a repair's destination; concurrent first copies are serialised by the installer's lock.
    """
    schema.install(conn, ("copy",))


def prepare_destination(dst_connstr: str, tasks: list[CopyTask], dests: list[TableInfo]) -> None:
    """Bookkeeping tables; then, in one transaction, TRUNCATE and drop secondary indexes."""
    try:
        with connect(dst_connstr, autocommit=True) as conn:
            ensure_bookkeeping(conn)
            with conn.transaction():
                emptied = {
                    dst.display: dst
                    for task, dst in zip(tasks, dests, strict=True)
                    if not task.skip_truncate
                }
                if emptied:
                    # One statement: tables of the copy may reference each other by FK.
                    idents = sql.SQL(", ").join(d.ident for d in emptied.values())
                    conn.execute(sql.SQL("truncate table {}").format(idents))
                for dst in emptied.values():
                    _drop_secondary_indexes(conn, dst)
    except psycopg.Error as exc:
        raise DatabaseError(f"{describe(dst_connstr)}: {error_text(exc)}") from None


def _drop_secondary_indexes(conn: psycopg.Connection, dst: TableInfo) -> None:
    # Indexes that back a constraint (primary key, unique, exclusion) stay: dropping them
    # would mean dropping the constraint.  The others are rebuilt once the data is in.
    rows = conn.execute(
        """
        select c.relname, pg_get_indexdef(i.indexrelid)
        from pg_index i join pg_class c on c.oid = i.indexrelid
        where i.indrelid = %s::regclass
          and not exists (select 1 from pg_constraint k where k.conindid = i.indexrelid)
        """,
        (dst.display,),
    ).fetchall()
    # saved_index survives a crash: the next finished copy of the table rebuilds them.
    for name, definition in rows:
        conn.execute(
            "insert into ferry_copy.saved_index (dest_table, index_name, index_def)"
            " values (%s, %s, %s) on conflict do nothing",
            (dst.display, name, definition),
        )
        conn.execute(sql.SQL("drop index {}").format(sql.Identifier(dst.schema, name)))


def finish_destination(dst_connstr: str, dests: list[TableInfo], copy_id: str) -> None:
    """Rebuild dropped indexes, forget this copy's bookkeeping, ANALYZE."""
    dest_names = sorted({d.display for d in dests})
    with connect(dst_connstr, autocommit=True) as conn:
        try:
            with conn.transaction():
                saved = conn.execute(
                    "select dest_table, index_name, index_def from ferry_copy.saved_index"
                    " where dest_table = any(%s)",
                    (dest_names,),
                ).fetchall()
                for dest, name, definition in saved:
                    log.info("copy %s: rebuilding index %s", dest, name)
                    conn.execute(definition)
                conn.execute(
                    "delete from ferry_copy.saved_index where dest_table = any(%s)", (dest_names,)
                )
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
