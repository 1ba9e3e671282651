"""The change feed's initial snapshot (option ``snapshot``): the tables' rows at a tick, read
as ``I`` events of ev_id 0 in the snapshot exported with the tick made for it, so that
the rows and the events after the tick are each change exactly once.  The snapshot is
taken and held by :class:`pgferry.stream.feed.Feed` on the driver; this module plans its
reads, one :class:`TableSnapshot` per table, which the executors run as spans."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import sql

from pgferry.queue import ticks as queue_ticks
from pgferry.registry import entries
from pgferry.stream import names


@dataclass(frozen=True)
class TableSnapshot:
    """One table's rows in the snapshot of a tick, read as ``I`` events of ev_id 0:
    ``query`` selects them in the columns of an event (as a span's query does)."""

    tick: int
    tick_time: datetime
    snapshot_id: str  # pg_export_snapshot() of the transaction the tick was made for
    query: str


def table_snapshots(
    conn: psycopg.Connection, queue: str, tables: tuple[str, ...], tick: int, snapshot_id: str
) -> list[TableSnapshot]:
    """The reads of the snapshot of ``tick`` (exported as ``snapshot_id``), one per table
    of ``tables`` (every table of the queue when empty)."""
    tick_time = queue_ticks.tick_time(conn, queue, tick)
    assert tick_time is not None  # the tick was made for this snapshot
    tables = tables or tuple(
        e.table_name for e in entries.list_tables(conn, queue, local_only=False)
    )
    return [
        TableSnapshot(tick, tick_time, snapshot_id, snapshot_query(conn, table)) for table in tables
    ]


def snapshot_query(conn: psycopg.Connection, table: str) -> str:
    """The rows of ``table`` as ``I`` events (ev_id 0): the image as the capture writes it
    and the primary key's columns in ev_type, so that the feed's key is the events' own."""
    key = conn.execute(
        "select coalesce(string_agg(quote_ident(a.attname), ',' order by k.ord), '')"
        " from pg_index i cross join lateral unnest(i.indkey) with ordinality k(attnum, ord)"
        " join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum"
        " where i.indrelid = to_regclass(%s) and i.indisprimary",
        (table,),
    ).fetchone()[0]
    return (
        sql.SQL(
            "select 0::bigint as ev_id, {name}::text as ev_extra1, {kind}::text as ev_type,"
            " row_to_json(x)::text as ev_data, null::text as ev_extra2,"
            " null::text as ev_extra4, null::timestamptz as ev_time from {table} x"
        )
        .format(
            name=sql.Literal(table),
            kind=sql.Literal(f"I:{key}"),
            table=sql.SQL(".").join(sql.Identifier(p) for p in names.split(conn, table)),
        )
        .as_string(conn)
    )
