"""Repair's differing rows found on the driver, for reads too small to be worth a Spark job.

:mod:`.repair` calls :func:`local_differences` when :func:`small_read` says so: both tables are
small (as compare's driver path decides), or the key ranges to read hold few rows (up to
:data:`LOCAL_MODE_ROWS` on the default configuration, where Spark would run in local mode).
It reads the same ranges with the same query as the Spark tasks (:func:`read_query`, values
as PostgreSQL prints them: the Spark tasks' through COPY, here as plain results loaded as
text), joins the two sides in a dict per query and returns the differences in the form the
Spark join gives, so the fix SQL is the same either way.  Nothing here imports PySpark or
pyarrow: a repair on the driver starts no JVM.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError
from pgferry.pipeline.keyranges import KeyRange
from pgferry.pipeline.snapshot import open_in_snapshot
from pgferry.sync import compare
from pgferry.sync.buckets import SESSION_SQL, Prepared, TablePlan

# One differing row: (join key, kind: insert, update or delete, the source's values, the
# destination's), values as PostgreSQL prints them (None: NULL, or the side has no row).
Difference = tuple[str, str, Sequence[str | None], Sequence[str | None]]


@dataclass(frozen=True)
class ReadJob:
    """Both sides' reads of repair's ranges, on the driver or in Spark tasks (pickled)."""

    connstrs: tuple[str, str]  # source, destination
    snapshots: tuple[str, str]
    plans: tuple[TablePlan, ...]
    ranges: tuple[tuple[int, KeyRange], ...]  # (table_no, range)
    whole: frozenset[int] = frozenset()  # tables read whole (ranges of READ_GROUP_BUCKETS)


# Tables within compare's LOCAL_PAGES are read whole on the driver; larger ones when at
# most this many rows (estimated, per side) inside the differing key ranges.
LOCAL_ROWS = 200_000
# The limit on the default configuration (local mode), where a Spark job would read from
# this machine too, after a JVM start (BENCHMARKS.md, "Where a local Spark pays off for
# compare and repair"). The driver holds one query's differing groups at a time.
LOCAL_MODE_ROWS = 2_000_000
# Ranges read by one query (OR'd: the server scans the key index once per range).
CHUNK_RANGES = 64
# A query's rows are first summed by the servers in this many groups (by a hash of the key);
# only the rows of groups whose count or checksum differ come to the driver.
ROW_GROUPS = 1024


def ordered_columns(plan: TablePlan) -> list[str]:
    """Key columns first, then the rest: the join reads keys at fixed positions."""
    return list(plan.key.names) + [c for c in plan.columns if c not in plan.key.names]


def read_query(
    plan: TablePlan,
    side: int,
    *ranges: KeyRange,
    groups: list[int] | None = None,
    select: sql.Composable | None = None,
) -> sql.Composed:
    """The rows of one side inside any of ``ranges``, key columns first (or ``select``);
    with ``groups`` only those in the key's :func:`key_group` listed."""
    target = plan.src if side == 0 else plan.dst
    preds = [plan.key.predicate(rng) for rng in ranges]
    where: list[sql.Composable] = [
        preds[0] if len(preds) == 1 else sql.SQL("(({}))").format(sql.SQL(") or (").join(preds))
    ]
    if target.condition:
        from pgferry import expressions  # pglast: only for a condition

        where.append(expressions.as_sql(target.condition))
    if groups is not None:
        where.append(sql.SQL("{} = any({})").format(key_group(plan), sql.Literal(groups)))
    return sql.SQL("select {} from {} where {}").format(
        select or sql.SQL(", ").join(map(sql.Identifier, ordered_columns(plan))),
        target.relation,
        sql.SQL(" and ").join(where),
    )


def key_group(plan: TablePlan) -> sql.Composable:
    """A row's group among ROW_GROUPS: a hash of its key's text, the same on both sides."""
    keys = sql.SQL(", ").join(map(sql.Identifier, plan.key.names))
    return sql.SQL("(hashtextextended(row({})::text, 0) & {})::int").format(
        keys, sql.Literal(ROW_GROUPS - 1)
    )


def small_read(
    prepared: Prepared,
    work: list[tuple[int, KeyRange]],
    src_connstr: str,
    local_mode: bool = False,
) -> bool:
    """Whether the ranges to read are few enough rows to join on the driver
    (``local_mode``: Spark would run in local mode, so the driver takes more)."""
    if all(
        max(src.pages, dst.pages) <= compare.LOCAL_PAGES
        for src, dst in zip(prepared.sources, prepared.dests, strict=True)
    ):
        return True
    limit = LOCAL_MODE_ROWS if local_mode else LOCAL_ROWS
    by_table: dict[int, list[KeyRange]] = {}
    for table_no, rng in work:
        by_table.setdefault(table_no, []).append(rng)
    rows = 0
    with connect(src_connstr, autocommit=True) as conn:
        for table_no, ranges in by_table.items():
            # The planner's estimate of the source rows in the ranges (the ranges may come
            # from another sampling of the keys than this one's buckets), asked for as the
            # reads will be: planning one query of all ranges costs their square.
            for first in range(0, len(ranges), CHUNK_RANGES):
                chunk = ranges[first : first + CHUNK_RANGES]
                select = read_query(prepared.plans[table_no], 0, *chunk)
                query = sql.SQL("explain (format json) {}").format(select)
                try:
                    found = conn.execute(query).fetchone()
                except psycopg.Error as exc:
                    raise DatabaseError(f"{describe(src_connstr)}: {error_text(exc)}") from None
                assert found is not None  # EXPLAIN answers one row
                rows += int(found[0][0]["Plan"]["Plan Rows"])
                if rows > limit:
                    return False
    return True


def local_differences(job: ReadJob, tables: int) -> list[list[Difference]]:
    """Per table: (key, kind, src values, dst values) of every differing row, as repair's
    Spark join returns them (``job`` is repair's read job)."""
    out: list[list[Difference]] = [[] for _ in range(tables)]
    if not job.ranges:
        return out
    conns: list[psycopg.Connection] = []
    try:
        for side, (connstr, snapshot) in enumerate(zip(job.connstrs, job.snapshots, strict=True)):
            conns.append(open_in_snapshot(connstr, snapshot))
            conns[-1].execute(SESSION_SQL)
            for table_no in {table_no for table_no, _ in job.ranges}:
                _as_text(conns[-1], job.plans[table_no], side)
        chunks: list[tuple[int, list[KeyRange]]] = []
        for table_no, rng in job.ranges:
            # A table read whole comes in ranges of many buckets: one per query, to keep
            # one query's rows (~200,000) in memory at a time.
            per_query = 1 if table_no in job.whole else CHUNK_RANGES
            if chunks and chunks[-1][0] == table_no and len(chunks[-1][1]) < per_query:
                chunks[-1][1].append(rng)
            else:
                chunks.append((table_no, [rng]))
        # Both sides at once: each query is the server's work, in its own connection.
        with ThreadPoolExecutor(2, thread_name_prefix="repair") as pool:
            for table_no, ranges in chunks:
                plan = job.plans[table_no]
                sums = list(pool.map(_group_sums, conns, (plan, plan), (0, 1), (ranges, ranges)))
                groups = sorted(g for g in sums[0].keys() | sums[1].keys()
                                if sums[0].get(g) != sums[1].get(g))  # fmt: skip
                if not groups:
                    continue
                src, dst = pool.map(
                    _read, conns, (plan, plan), (0, 1), (ranges, ranges), (groups, groups)
                )
                out[table_no] += _differ(src, dst, len(ordered_columns(plan)))
    except psycopg.Error as exc:
        raise DatabaseError(f"repair read: {error_text(exc)}") from None
    finally:
        for conn in conns:
            conn.close()
    return out


def _group_sums(
    conn: psycopg.Connection, plan: TablePlan, side: int, ranges: list[KeyRange]
) -> dict[int, tuple[str, str]]:
    """Per key group: rows and the sum of a hash of each row's text (the values as the
    driver compares them), summed by the server."""
    row = sql.SQL(", ").join(map(sql.Identifier, ordered_columns(plan)))
    select = sql.SQL(
        "{} as g, count(*)::text, sum(hashtextextended(row({})::text, 0))::text"
    ).format(key_group(plan), row)
    query = sql.SQL("{} group by 1").format(read_query(plan, side, *ranges, select=select))
    return {int(g): (n, total) for g, n, total in conn.execute(query)}


def _read(
    conn: psycopg.Connection,
    plan: TablePlan,
    side: int,
    ranges: list[KeyRange],
    groups: list[int] | None = None,
) -> dict[str, tuple[Any, ...]]:
    """Join key -> row (all values text, as the Spark tasks read them)."""
    nkey = len(plan.key.names)
    query = read_query(plan, side, *ranges, groups=groups)
    with conn.cursor() as cur:
        # The Spark path's join key: key texts joined by NUL (never in PostgreSQL text).
        if nkey == 1:
            return {row[0]: row for row in cur.execute(query)}
        return {"\x00".join(row[:nkey]): row for row in cur.execute(query)}


def _as_text(conn: psycopg.Connection, plan: TablePlan, side: int) -> None:
    """Load every column of ``plan``'s rows on ``conn`` as the text PostgreSQL prints (what
    COPY sends): the rows come as plain results, which psycopg's C code parses about twice
    as fast as COPY's rows (measured in BENCHMARKS.md)."""
    query = read_query(plan, side, KeyRange(None, None))
    cur = conn.execute(sql.SQL("select * from ({}) as _q limit 0").format(query))
    for column in cur.description or ():
        conn.adapters.register_loader(column.type_code, TextLoader)


def _differ(
    src: dict[str, tuple[Any, ...]], dst: dict[str, tuple[Any, ...]], width: int
) -> list[Difference]:
    absent = (None,) * width
    out: list[Difference] = [
        (k, "insert", row, absent) if k not in dst else (k, "update", row, dst[k])
        for k, row in src.items()
        if dst.get(k) != row
    ]
    out += [(k, "delete", absent, row) for k, row in dst.items() if k not in src]
    return out
