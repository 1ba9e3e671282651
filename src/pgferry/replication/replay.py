"""Replay of one batch: read on the provider, collapse per key, stage, apply set-based.

Data path (design-notes §3, §7):

1. The batch's ev_id span is cut into ranges; each range is read by one query on the
   provider (:func:`pgferry.replication.eventsql.range_query`) that routes, filters and
   collapses inside the range.
2. Spark executors run those queries in parallel, collapse per (table, key) across ranges
   (the last event by ev_id wins) and COPY the final images into ``ferry.replay_stage`` on
   the subscriber, each task in its own transaction after deleting its own part, so a task
   run twice cannot double anything.
3. The driver applies the staged rows in ONE transaction (:func:`apply_staged`): TRUNCATE
   barriers, then per table one DELETE ... USING and one INSERT ... ON CONFLICT DO UPDATE,
   then sequences; the caller adds the tick record to the same transaction.

A batch whose estimated size is at most ``local_max_events`` skips Spark: the same queries
run on the driver and the rows go into the stage inside the applying transaction.  A Spark
job costs more than such a batch does, and the result is identical.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgferry.db import connect, error_text
from pgferry.errors import DatabaseError, PgferryError
from pgferry.replication.routes import Route

log = logging.getLogger(__name__)

StageRow = tuple[int, str, str, str | None, str | None]  # ev_id, table, op, key, data

STAGE_COLUMNS = (
    "consumer_name",
    "batch_id",
    "part",
    "ev_id",
    "table_name",
    "op",
    "row_key",
    "row_data",
)


class ReplayError(PgferryError):
    """A batch could not be applied (the message names the table where it is known)."""


@dataclass
class ApplyStats:
    upserts: int = 0
    deletes: int = 0
    truncates: int = 0
    sequences: int = 0
    tables: set[str] = field(default_factory=set)

    @property
    def rows(self) -> int:
        return self.upserts + self.deletes


def split_ranges(lo: int | None, hi: int | None, parts: int) -> list[tuple[int | None, int | None]]:
    """Cut (lo, hi] into ``parts`` ranges; the outer ones are open so nothing is missed.

    Events of long transactions can carry ids below ``lo`` or above ``hi`` (ids are taken
    at insert time, membership is decided by commit): open ends cover them.
    """
    if lo is None or hi is None or parts <= 1 or hi - lo < parts:
        return [(None, None)]
    step = (hi - lo) // parts
    bounds = [lo + step * i for i in range(1, parts)]
    edges: list[int | None] = [None, *bounds, None]
    return list(zip(edges[:-1], edges[1:], strict=True))


# --- executor side -----------------------------------------------------------------------


def read_range(provider_dsn: str, query: str) -> list[StageRow]:
    """Run one range query on the provider (no parameters: the text is fully composed)."""
    try:
        with connect(provider_dsn, autocommit=True, application_name="pgferry-replay") as conn:
            return [tuple(r) for r in conn.execute(query.encode()).fetchall()]  # type: ignore[misc]
    except psycopg.Error as exc:
        raise DatabaseError(f"reading batch events: {error_text(exc)}") from None


def later(a: StageRow, b: StageRow) -> StageRow:
    return a if a[0] >= b[0] else b


def collapse(rows: Iterable[StageRow]) -> list[StageRow]:
    """Keep the last event by ev_id per (table, key); R rows share the key None."""
    last: dict[tuple[str, str | None], StageRow] = {}
    for row in rows:
        k = (row[1], row[3])
        prev = last.get(k)
        if prev is None or row[0] > prev[0]:
            last[k] = row
    return list(last.values())


def copy_rows(
    conn: psycopg.Connection, consumer: str, batch_id: int, part: int, rows: Iterable[StageRow]
) -> int:
    n = 0
    cols = sql.SQL(", ").join(map(sql.Identifier, STAGE_COLUMNS))
    stmt = sql.SQL("copy ferry.replay_stage ({}) from stdin").format(cols)
    with conn.cursor().copy(stmt) as cp:
        for ev_id, table, op, key, data in rows:
            cp.write_row((consumer, batch_id, part, ev_id, table, op, key, data))
            n += 1
    return n


def stage_part(
    local_dsn: str, consumer: str, batch_id: int, part: int, rows: Iterable[StageRow]
) -> int:
    """Replace this part's rows in the stage, in one transaction (safe to run twice)."""
    try:
        with connect(local_dsn, application_name="pgferry-replay") as conn, conn.transaction():
            conn.execute(
                "delete from ferry.replay_stage"
                " where consumer_name = %s and batch_id = %s and part = %s",
                (consumer, batch_id, part),
            )
            return copy_rows(conn, consumer, batch_id, part, rows)
    except psycopg.Error as exc:
        raise DatabaseError(f"staging batch rows: {error_text(exc)}") from None


def _spark_stage(
    spark,
    provider_dsn: str,
    local_dsn: str,
    consumer: str,
    batch_id: int,
    queries: Sequence[str],
) -> int:
    """One Spark job: read ranges, collapse across them, COPY each partition to the stage."""
    sc = spark.sparkContext
    nparts = max(1, len(queries))

    def read(query: str) -> Iterator[tuple[tuple[str, str | None], StageRow]]:
        for row in read_range(provider_dsn, query):
            yield (row[1], row[3]), row

    def stage(index: int, items: Iterator[tuple[object, StageRow]]) -> Iterator[int]:
        yield stage_part(local_dsn, consumer, batch_id, index, (row for _, row in items))

    rdd = (
        sc.parallelize(list(queries), nparts)
        .flatMap(read)
        .reduceByKey(later, numPartitions=nparts)
        .mapPartitionsWithIndex(stage)
    )
    try:
        return int(sum(rdd.collect()))
    except Exception as exc:  # noqa: BLE001 - Py4J wraps executor failures
        raise ReplayError(f"batch {batch_id}: {spark_error_text(exc)}") from None


_ERR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*Error|\w*Exception): (.+)$")


def spark_error_text(exc: BaseException) -> str:
    """The Python error raised inside an executor, as one line (Py4J adds pages of Java)."""
    found = None
    for line in str(exc).splitlines():
        m = _ERR_LINE.match(line.strip())
        if m and not m.group(1).startswith(("Py4J", "Spark")):
            found = m.group(2) if m.group(1) in ("DatabaseError", "ReplayError") else line.strip()
    if found is None:
        found = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return error_text(RuntimeError(found))


# --- driver side -------------------------------------------------------------------------


def clear_stage(conn: psycopg.Connection, consumer: str) -> None:
    conn.execute("delete from ferry.replay_stage where consumer_name = %s", (consumer,))


def stage_batch(
    *,
    spark_factory,
    provider_dsn: str,
    local_dsn: str,
    local_conn: psycopg.Connection,
    consumer: str,
    batch_id: int,
    queries: Sequence[str],
    use_spark: bool,
) -> int:
    """Fill the stage for ``batch_id``.

    Spark path: the stage is cleared and committed first, the tasks commit their own parts.
    Driver path: rows are read here and copied inside ``local_conn``'s open transaction.
    """
    if use_spark:
        with local_conn.transaction():
            clear_stage(local_conn, consumer)
        return _spark_stage(spark_factory(), provider_dsn, local_dsn, consumer, batch_id, queries)
    clear_stage(local_conn, consumer)
    rows: list[StageRow] = []
    for query in queries:
        rows.extend(read_range(provider_dsn, query))
    return copy_rows(local_conn, consumer, batch_id, 0, collapse(rows))


def _stage_filter(consumer: str, batch_id: int, table: str, op: str, after: int) -> sql.Composed:
    return sql.SQL(
        "s.consumer_name = {} and s.batch_id = {} and s.table_name = {}"
        " and s.op = {} and s.ev_id > {}"
    ).format(
        sql.Literal(consumer),
        sql.Literal(batch_id),
        sql.Literal(table),
        sql.Literal(op),
        sql.Literal(after),
    )


def apply_staged(
    conn: psycopg.Connection,
    consumer: str,
    batch_id: int,
    routes: dict[str, Route],
    source_columns: dict[str, frozenset[str] | None],
) -> ApplyStats:
    """Apply the staged batch inside the caller's transaction; clears the stage rows."""
    stats = ApplyStats()
    summary = conn.execute(
        """
        select table_name, op, count(*), max(ev_id) from ferry.replay_stage
         where consumer_name = %s and batch_id = %s
         group by table_name, op
        """,
        (consumer, batch_id),
    ).fetchall()
    ops: dict[str, dict[str, tuple[int, int]]] = {}
    for table, op, count, max_ev in summary:
        ops.setdefault(table, {})[op] = (count, max_ev)

    # Barriers first: what a TRUNCATE erased is dropped by the ev_id > barrier filter below.
    barrier = {t: o["R"][1] for t, o in ops.items() if "R" in o and t in routes}
    truncate = [routes[t] for t in sorted(barrier) if not routes[t].skip_truncate]
    if truncate:
        conn.execute(
            sql.SQL("truncate only {}").format(sql.SQL(", ").join(r.dest for r in truncate))
        )
        stats.truncates = len(truncate)

    for table, table_ops in sorted(ops.items()):
        route = routes.get(table)
        if route is None:
            continue
        after = barrier.get(table, 0)
        try:
            if "D" in table_ops:
                stats.deletes += _delete(
                    conn, route, _stage_filter(consumer, batch_id, table, "D", after)
                )
            if "U" in table_ops:
                cols = _apply_columns(route, source_columns.get(table))
                stats.upserts += _upsert(
                    conn, route, cols, _stage_filter(consumer, batch_id, table, "U", after)
                )
        except psycopg.Error as exc:
            raise ReplayError(f"applying to {route.dest_text}: {error_text(exc)}") from None
        stats.tables.add(table)

    seq_rows = conn.execute(
        """
        select s.table_name, max(s.row_data::bigint) from ferry.replay_stage s
         where s.consumer_name = %s and s.batch_id = %s and s.op = 'S'
         group by s.table_name
        """,
        (consumer, batch_id),
    ).fetchall()
    for seq_name, value in seq_rows:
        conn.execute("select ferry.seq_advance(%s::regclass, %s)", (seq_name, value))
        conn.execute(
            """
            update ferry.seq_info set last_value = greatest(coalesce(last_value, %s), %s)
             where seq_name = %s and local
            """,
            (value, value, seq_name),
        )
        stats.sequences += 1
    clear_stage(conn, consumer)
    return stats


def _apply_columns(route: Route, src: frozenset[str] | None) -> tuple[str, ...]:
    """Local columns that the source also has (a column only on one side keeps its own)."""
    if src is None:
        return route.columns
    return tuple(c for c in route.columns if c in src or c in route.pk)


def _delete(conn: psycopg.Connection, route: Route, where: sql.Composed) -> int:
    pk = [sql.Identifier(c) for c in route.pk]
    stmt = sql.SQL(
        "delete from {dest} as t using ("
        " select {rpk} from ferry.replay_stage s"
        " cross join lateral json_populate_record(null::{dest}, s.row_data::json) as r"
        " where {where}) as d"
        " where ({tpk}) = ({dpk})"
    ).format(
        dest=route.dest,
        rpk=sql.SQL(", ").join(sql.SQL("r.{}").format(c) for c in pk),
        where=where,
        tpk=sql.SQL(", ").join(sql.SQL("t.{}").format(c) for c in pk),
        dpk=sql.SQL(", ").join(sql.SQL("d.{}").format(c) for c in pk),
    )
    return conn.execute(stmt).rowcount


def _upsert(
    conn: psycopg.Connection, route: Route, cols: tuple[str, ...], where: sql.Composed
) -> int:
    idents = [sql.Identifier(c) for c in cols]
    rest = [sql.Identifier(c) for c in cols if c not in route.pk]
    if rest:
        action = sql.SQL("do update set {}").format(
            sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(c) for c in rest)
        )
    else:
        action = sql.SQL("do nothing")
    stmt = sql.SQL(
        "insert into {dest} as t ({cols}) overriding system value"
        " select {rcols} from ferry.replay_stage s"
        " cross join lateral json_populate_record(null::{dest}, s.row_data::json) as r"
        " where {where}"
        " on conflict ({pk}) {action}"
    ).format(
        dest=route.dest,
        cols=sql.SQL(", ").join(idents),
        rcols=sql.SQL(", ").join(sql.SQL("r.{}").format(c) for c in idents),
        where=where,
        pk=sql.SQL(", ").join(sql.Identifier(c) for c in route.pk),
        action=action,
    )
    return conn.execute(stmt).rowcount
