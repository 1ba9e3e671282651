"""The registry rows a merge leaf's parts share: one destination registered by several
queues of the database (:mod:`pgferry.node.merge` has the rules).

Reads of ``ferry.table_info`` across queues, and of ``ferry.applied_execute`` (the scripts a
part ran), in the caller's transaction.  Which queues form one merged set is the nodes'
business (``ferry_node.node_info``): the caller passes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg.rows import class_row

from pgferry.registry.entries import _TABLE_COLS, TableEntry


def registrations(conn: psycopg.Connection, dest: str, *, besides: str) -> list[TableEntry]:
    """The local entries of queues other than ``besides`` whose destination is ``dest``,
    by queue."""
    with conn.cursor(row_factory=class_row(TableEntry)) as cur:
        cur.execute(
            f"""
            select {_TABLE_COLS} from ferry.table_info
             where queue_name <> %s and local and coalesce(dest_table, table_name) = %s
             order by queue_name
            """,
            (besides, dest),
        )
        return cur.fetchall()


def held_elsewhere(
    conn: psycopg.Connection, queue: str, dests: Sequence[str], states: Sequence[str]
) -> list[str]:
    """Those of ``dests`` that another queue's local entry holds in one of ``states``."""
    rows = conn.execute(
        """
        select distinct coalesce(dest_table, table_name) from ferry.table_info
         where queue_name <> %s and local and merge_state = any(%s)
           and coalesce(dest_table, table_name) = any(%s)
        """,
        (queue, list(states), list(dests)),
    ).fetchall()
    return [r[0] for r in rows]


def shared(
    conn: psycopg.Connection, queue: str, tables: Sequence[str], states: Sequence[str]
) -> list[tuple[str, str]]:
    """(table, other queue) for each of ``queue``'s ``tables`` registered as merged (no
    ``no_merge``) whose destination another queue holds in one of ``states``."""
    rows = conn.execute(
        """
        select t.table_name, o.queue_name
          from ferry.table_info t
          join ferry.table_info o
            on o.queue_name <> t.queue_name and o.local and o.merge_state = any(%s)
           and coalesce(o.dest_table, o.table_name) = coalesce(t.dest_table, t.table_name)
         where t.queue_name = %s and t.table_name = any(%s)
           and not coalesce((t.table_attrs->>'no_merge')::bool, false)
         order by 1, 2
        """,
        (list(states), queue, list(tables)),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def mergeable(conn: psycopg.Connection, queue: str) -> set[str]:
    """The local tables of ``queue`` not registered with ``no_merge``."""
    rows = conn.execute(
        """
        select table_name from ferry.table_info
         where queue_name = %s and local
           and not coalesce((table_attrs->>'no_merge')::bool, false)
        """,
        (queue,),
    ).fetchall()
    return {r[0] for r in rows}


def script_ran(
    conn: psycopg.Connection, queues: Sequence[str], name: str, sha256: str
) -> str | None:
    """The first of ``queues`` that ran script ``name`` with this text in this database;
    None when none has."""
    row = conn.execute(
        """
        select queue_name from ferry.applied_execute
         where queue_name = any(%s) and file_name = %s and file_hash = %s
         order by queue_name limit 1
        """,
        (list(queues), name, sha256),
    ).fetchone()
    return row[0] if row else None
