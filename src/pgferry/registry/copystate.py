"""Where a table's initial copy and catch-up stand: the copy columns of ``ferry.table_info``.

The worker's copy (:mod:`pgferry.apply.copyrun`) and its hand-over to the main stream
(:mod:`pgferry.apply.handover`) write these columns and nothing else does: the state of a
group of tables (``merge_state``, ``copy_snapshot``, ``copy_consumer``, ``catchup_tick``
...), the copy's source estimate and last failure, and the copy snapshots that filter
events until no event they contain can come any more.  Plain writes in the caller's
transaction, as in :mod:`pgferry.registry.entries` (which holds the rest of the row).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from pgferry.registry.entries import MERGE_STATES


@dataclass(frozen=True)
class WaitingCopy:
    """One table waiting for its copy (state NULL, or ``in-copy`` after a crash)."""

    group_id: str  # its copy_group, or its name when it has none
    table_name: str
    dest_table: str  # the local table copied into (``%I.%I`` form)
    copy_condition: str | None
    skip_truncate: bool
    max_parallel_copy: int | None
    table_attrs: dict[str, Any]
    merged: bool  # one part of a table merged from several queues (node/merge.py)


def waiting_copies(conn: psycopg.Connection, queue: str, *, combined: bool) -> list[WaitingCopy]:
    """Tables of ``queue`` waiting for their copy, by group (oldest group first) and name;
    ``combined``: the node merges its queue into another (a table is then a merged part
    unless its ``no_merge`` attribute says otherwise)."""
    with conn.cursor(row_factory=class_row(WaitingCopy)) as cur:
        cur.execute(
            """
            select coalesce(copy_group::text, table_name) as group_id, table_name,
                   coalesce(dest_table, table_name) as dest_table, copy_condition,
                   skip_truncate, max_parallel_copy,
                   coalesce(table_attrs, '{}') as table_attrs,
                   %s and not coalesce((table_attrs->>'no_merge')::bool, false) as merged
              from ferry.table_info
             where queue_name = %s and local
               and (merge_state is null or merge_state = 'in-copy')
             order by copy_group nulls last, table_name
            """,
            (combined, queue),
        )
        return cur.fetchall()


@dataclass(frozen=True)
class CatchUp:
    """A copied group replaying its own consumer's batches (``catching-up`` tables of one
    ``copy_consumer``)."""

    consumer: str
    tables: tuple[str, ...]
    tick: int  # last tick applied for the group here
    node: str | None = None  # whose queue the consumer reads (None: the provider's)
    filtered: bool = False  # a table still skips the events visible in its copy snapshot
    chunked: bool = False  # copied in chunks: rows missing here are expected, not divergence

    @property
    def may_join(self) -> bool:
        """A group that reads another node's queue joins once its snapshot is passed."""
        return self.node is None or not self.filtered


def catching_up(conn: psycopg.Connection, queue: str) -> list[CatchUp]:
    """Copied groups of ``queue`` that replay their own consumer's batches."""
    with conn.cursor(row_factory=class_row(CatchUp)) as cur:
        cur.execute(
            """
            select copy_consumer as consumer,
                   array_agg(table_name order by table_name) as tables,
                   min(catchup_tick) as tick, min(catchup_node) as node,
                   bool_or(copy_snapshot is not null) as filtered,
                   coalesce(bool_or(copy_mode = 'chunked'), false) as chunked
              from ferry.table_info
             where queue_name = %s and local and merge_state = 'catching-up'
               and copy_consumer is not null
             group by copy_consumer order by 1
            """,
            (queue,),
        )
        return [replace(g, tables=tuple(g.tables)) for g in cur.fetchall()]


def copy_consumers(conn: psycopg.Connection, queue: str) -> set[str]:
    """The consumers the copies of ``queue``'s tables read (a group's, while it copies and
    catches up)."""
    rows = conn.execute(
        "select copy_consumer from ferry.table_info where queue_name = %s"
        " and copy_consumer is not null",
        (queue,),
    ).fetchall()
    return {r[0] for r in rows}


def unused_copy_consumers(
    conn: psycopg.Connection, queue: str, table: str, prefix: str
) -> list[str]:
    """The consumers a copy of ``table`` may hold that no other local table of ``queue``
    copies or catches up through: the one recorded, and the name ``prefix`` + its group
    (or table) name a copy gives its group's (registered before it is recorded).  None for
    a table in state ok: its copy's consumer went at the hand-over."""
    rows = conn.execute(
        """
        select distinct c.name
          from ferry.table_info t
         cross join lateral unnest(array[t.copy_consumer,
                                         %s || coalesce(t.copy_group::text, t.table_name)])
               as c(name)
         where t.queue_name = %s and t.table_name = %s and t.merge_state is distinct from 'ok'
           and c.name is not null
           and not exists (select 1 from ferry.table_info o
                            where o.queue_name = t.queue_name and o.local
                              and o.table_name <> t.table_name
                              and (o.copy_consumer = c.name
                                   or (coalesce(o.copy_group::text, o.table_name)
                                       = coalesce(t.copy_group::text, t.table_name)
                                       and o.merge_state is distinct from 'ok')))
        """,
        (prefix, queue, table),
    ).fetchall()
    return [r[0] for r in rows]


def not_ok(conn: psycopg.Connection, queue: str, tables: Sequence[str]) -> list[str]:
    """Those of ``tables`` that this node does not hold in state ``ok``: on a provider,
    tables whose copy must wait."""
    rows = conn.execute(
        """
        select t.name from unnest(%s::text[]) as t(name)
         where not exists (select 1 from ferry.table_info i
                            where i.queue_name = %s and i.table_name = t.name
                              and i.local and i.merge_state = 'ok')
        """,
        (list(tables), queue),
    ).fetchall()
    return [r[0] for r in rows]


# Whether every table of the node is ``ok`` (parameter: the queue name); the worker reads it
# with the other reads of its loop, in one statement.
SETTLED = sql.SQL(
    "select not exists (select 1 from ferry.table_info where queue_name = {q} and local"
    " and merge_state is distinct from 'ok')"
)
SETTLED_SQL = SETTLED.format(q=sql.Placeholder()).as_string(None)


def set_copy_state(
    conn: psycopg.Connection,
    queue: str,
    tables: Sequence[str],
    state: str,
    *,
    consumer: str,
    tick: int | None,
    copy_id: str,
    source: str | None,
    catchup_node: str | None,
    snapshot: str | None = None,
    mode: str | None = None,
) -> None:
    """Move a copy group to ``state`` with its position; entering ``in-copy`` restarts the
    copy's clock and forgets its estimate; any state forgets the last failure.  ``mode``:
    ``chunked`` for a copy made in chunks (catching up without a snapshot filter)."""
    if state not in MERGE_STATES or state is None:
        raise ValueError(f"bad merge_state for a copy: {state!r}")
    conn.execute(
        """
        update ferry.table_info
           set merge_state = %s, copy_snapshot = %s::pg_snapshot, copy_consumer = %s,
               catchup_tick = %s, copy_id = %s, copy_source = %s, catchup_node = %s,
               copy_mode = %s,
               copy_started = case when %s = 'in-copy' then now() else copy_started end,
               copy_total = case when %s = 'in-copy' then null else copy_total end,
               copy_error = null
         where queue_name = %s and table_name = any(%s)
        """,
        (state, snapshot, consumer, tick, copy_id, source, catchup_node, mode, state, state,
         queue, list(tables)),
    )  # fmt: skip


def chunked_in_copy(
    conn: psycopg.Connection, queue: str, tables: Sequence[str]
) -> tuple[str, str, int] | None:
    """(copy_id, consumer, tick) of a chunked copy of exactly ``tables`` left ``in-copy``
    (a worker stopped mid-copy): what a resumed copy goes on with; None otherwise."""
    rows = conn.execute(
        """
        select distinct copy_id, copy_consumer, catchup_tick from ferry.table_info
         where queue_name = %s and table_name = any(%s) and merge_state = 'in-copy'
           and copy_mode = 'chunked' and copy_id is not null
           and copy_consumer is not null and catchup_tick is not null
        """,
        (queue, list(tables)),
    ).fetchall()
    count = conn.execute(
        "select count(*) from ferry.table_info where queue_name = %s and table_name = any(%s)"
        " and copy_mode = 'chunked' and merge_state = 'in-copy'",
        (queue, list(tables)),
    ).fetchone()
    if len(rows) != 1 or not count or count[0] != len(tables):
        return None
    return rows[0][0], rows[0][1], rows[0][2]


def set_copy_totals(conn: psycopg.Connection, queue: str, totals: Mapping[str, int | None]) -> None:
    """The source's estimated rows per destination table, for the copy's progress."""
    for dest, total in totals.items():
        conn.execute(
            """
            update ferry.table_info set copy_total = %s
             where queue_name = %s and coalesce(dest_table, table_name) = %s
            """,
            (total, queue, dest),
        )


def set_copy_error(
    conn: psycopg.Connection, queue: str, tables: Sequence[str], error: str | None
) -> None:
    """The copy's last failure, shown by ``tables`` until the copy is tried again."""
    conn.execute(
        "update ferry.table_info set copy_error = %s"
        " where queue_name = %s and table_name = any(%s)",
        (error, queue, list(tables)),
    )


def move_catchup_tick(
    conn: psycopg.Connection, queue: str, consumer: str, old_tick: int | None, tick: int
) -> int:
    """Move the catching-up group of ``consumer`` from ``old_tick`` to ``tick``; returns
    how many tables moved (fewer than the group's: another applier moved it meanwhile)."""
    return conn.execute(
        """
        update ferry.table_info set catchup_tick = %s
         where queue_name = %s and copy_consumer = %s and merge_state = 'catching-up'
           and catchup_tick = %s
        """,
        (tick, queue, consumer, old_tick),
    ).rowcount


def finish_catchup(conn: psycopg.Connection, queue: str, consumer: str) -> None:
    """The catching-up group of ``consumer`` turns ``ok``: the main stream takes it over."""
    conn.execute(
        """
        update ferry.table_info
           set merge_state = 'ok', copy_consumer = null, catchup_tick = null,
               catchup_node = null
         where queue_name = %s and copy_consumer = %s and merge_state = 'catching-up'
        """,
        (queue, consumer),
    )


def clear_group_snapshots(
    conn: psycopg.Connection, queue: str, consumer: str, tick_snapshot: str
) -> int:
    """Clear the copy snapshots of ``consumer``'s catching-up group that lie wholly before
    ``tick_snapshot``; returns how many of the group's tables still keep one."""
    row = conn.execute(
        """
        with cleared as (
            update ferry.table_info set copy_snapshot = null
             where queue_name = %s and copy_consumer = %s and merge_state = 'catching-up'
               and copy_snapshot is not null
               and pg_snapshot_xmax(copy_snapshot) <= pg_snapshot_xmin(%s::pg_snapshot)
            returning table_name)
        select count(*) from ferry.table_info
         where queue_name = %s and copy_consumer = %s and copy_snapshot is not null
           and table_name not in (select table_name from cleared)
        """,
        (queue, consumer, tick_snapshot, queue, consumer),
    ).fetchone()
    assert row is not None
    count: int = row[0]
    return count


def clear_snapshots(conn: psycopg.Connection, queue: str, tick_snapshot: str) -> list[str]:
    """Clear the copy snapshots of ``queue``'s ok tables that lie wholly before
    ``tick_snapshot``; returns those tables."""
    rows = conn.execute(
        """
        update ferry.table_info set copy_snapshot = null
         where queue_name = %s and local and merge_state = 'ok' and copy_snapshot is not null
           and pg_snapshot_xmax(copy_snapshot) <= pg_snapshot_xmin(%s::pg_snapshot)
        returning table_name
        """,
        (queue, tick_snapshot),
    ).fetchall()
    return [r[0] for r in rows]
