"""The destination side of a copy, on the driver: before and after the Spark tasks run.

Before: the ``ferry_copy`` bookkeeping schema exists, the copy's role is checked for every
right the copy will use on each table (:func:`missing_right`), the tables are emptied
(TRUNCATE unless ``skip_truncate``) and their secondary indexes dropped, and their primary
key and unique constraints where that is safe (:mod:`.keys`), remembered in
``ferry_copy.saved_index``.  The check comes first because the rows are committed chunk by
chunk before the indexes are built again: a role that may drop a key but not build it
(the table's owner without CREATE on its schema) would otherwise leave the table without
its key until a copy by a role that may.
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
from pgferry.pipeline.copy.keys import drop_for_load, droppable, rebuild
from pgferry.pipeline.copy.plan import CopyTask
from pgferry.pipeline.tables import TableInfo


def ensure_bookkeeping(conn: psycopg.Connection) -> None:
    """Install or upgrade the ``ferry_copy`` schema (sql/copy/) on the destination.

    It stands alone (no queue or node schema needed), so any database can be a copy's or
    a repair's destination; concurrent first copies are serialised by the installer's lock.
    """
    schema.install(conn, ("copy",))


# What the copy does to a table, and the right each needs (PostgreSQL's own checks).
_RIGHTS_SQL = """
select current_user,
       has_table_privilege(c.oid, 'INSERT'),
       has_table_privilege(c.oid, 'TRUNCATE'),
       pg_has_role(c.relowner, 'USAGE'),
       has_schema_privilege(c.relnamespace, 'CREATE'),
       c.relnamespace::regnamespace::text
from pg_class c where c.oid = %s::regclass
"""


def missing_right(
    conn: psycopg.Connection, dst: TableInfo, truncate: bool, key: tuple[str, ...]
) -> str | None:
    """What the copy's role lacks on ``dst``, in words (``role R lacks ...``); None when none.

    Loading needs INSERT and the right to set ``session_replication_role``; emptying needs
    TRUNCATE; dropping indexes and keys for the load needs the table's ownership (or
    membership in its owner), and building them again CREATE on the table's schema.
    Indexes are dropped only from a table the copy empties.
    """
    replica = _may_set_replica(conn)
    row = conn.execute(_RIGHTS_SQL, (dst.display,)).fetchone()
    assert row is not None
    role, insert, may_truncate, owner, create, schema_name = row
    lacking = None
    if not insert:
        lacking = "INSERT on the table"
    elif not replica:
        lacking = (
            "the right to set session_replication_role (the load runs without triggers;"
            f" PostgreSQL 15: GRANT SET ON PARAMETER session_replication_role TO {role})"
        )
    elif truncate and not may_truncate:
        lacking = "TRUNCATE on the table"
    elif truncate and droppable(conn, dst, key):
        if not owner:
            lacking = "ownership of the table (its indexes are dropped for the load)"
        elif not create:
            lacking = f"CREATE on schema {schema_name} (the indexes are built again after the load)"
    return None if lacking is None else f"role {role} lacks {lacking}"


def _may_set_replica(conn: psycopg.Connection) -> bool:
    """Whether this session may set ``session_replication_role``, as every chunk does; tried
    in a savepoint rolled back, the setting left as it was."""
    try:
        with conn.transaction():
            conn.execute("set local session_replication_role = replica")
            raise psycopg.Rollback()
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True


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
                for task, dst, key in zip(tasks, dests, keys, strict=True):
                    lacking = missing_right(conn, dst, not task.skip_truncate, key)
                    if lacking is not None:
                        raise DatabaseError(
                            f"{describe(dst_connstr)}: copy of {dst.display}: {lacking};"
                            " nothing was changed"
                        )
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


def rows_by_copy(conn: psycopg.Connection) -> dict[tuple[str, str], int]:
    """Rows recorded so far by every copy running into the database on ``conn``, per
    (copy_id, dest_table) (a finished copy's rows are removed); {} without ``ferry_copy``."""
    row = conn.execute("select to_regclass('ferry_copy.range_done') is not null").fetchone()
    if not row or not row[0]:
        return {}
    rows = conn.execute(
        "select copy_id, dest_table, sum(rows)::bigint from ferry_copy.range_done"
        " group by copy_id, dest_table"
    ).fetchall()
    return {(copy_id, table): int(count) for copy_id, table, count in rows}
