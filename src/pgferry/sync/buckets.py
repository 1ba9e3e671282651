"""What compare and repair share: both sides of a table pair, split into primary-key buckets.

On the driver, :func:`prepare` resolves each table pair, checks that the primary keys agree and
samples key boundaries on the source snapshot; :func:`bucket_groups` cuts the buckets into
contiguous groups, one Spark task's worth each.  Each table's :class:`TablePlan` (its two
sides and its key) and each :class:`BucketGroup` travel to the executors, so they hold plain
values only and must stay picklable.  Executors start their sessions with :data:`SESSION_SQL`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError
from pgferry.pipeline.keyranges import Key, KeySpec, sample_boundaries
from pgferry.pipeline.snapshot import open_in_snapshot
from pgferry.pipeline.tables import TableInfo, relation, resolve_table

# Text forms of values must not depend on per-session settings of either side.
SESSION_SETTINGS = (
    "set timezone = 'UTC'",
    "set datestyle = 'ISO, YMD'",
    "set intervalstyle = 'postgres'",
    "set extra_float_digits = 1",
    "set bytea_output = 'hex'",
)
SESSION_SQL = "; ".join(SESSION_SETTINGS)


@dataclass(frozen=True)
class CompareTask:
    """One table pair to compare or repair."""

    source_table: str
    dest_table: str
    copy_condition: str | None = None  # applied on the source only
    dest_condition: str | None = None  # applied on the destination only
    key: tuple[str, ...] | None = None  # the rows' key when not the primary key; () none
    exclude_columns: tuple[str, ...] = ()  # left out on both sides


@dataclass(frozen=True)
class Side:
    """One side's table and the condition its rows must meet."""

    schema: str
    name: str
    condition: str | None
    partitioned: bool = False

    @property
    def relation(self) -> sql.Composable:
        return relation(self.schema, self.name, self.partitioned)


@dataclass(frozen=True)
class BucketGroup:
    """Contiguous buckets of one table: one task's key range and the boundaries inside it."""

    table_no: int
    first_bucket: int  # global number of the group's first bucket
    lower: Key | None
    upper: Key | None
    thresholds: tuple[Key, ...]  # boundaries inside the group


@dataclass(frozen=True)
class TablePlan:
    """How to read one table pair: both sides, the common columns, the key."""

    src: Side
    dst: Side
    columns: tuple[str, ...]
    key: KeySpec
    by_type: bool = False  # hash each value by its type (fast) instead of its text form


@dataclass
class Prepared:
    """Tables resolved and split (driver only)."""

    tasks: list[CompareTask]
    sources: list[TableInfo]
    dests: list[TableInfo]
    plans: list[TablePlan]
    boundaries: list[list[Key]]


def prepare(
    src_connstr: str,
    dst_connstr: str,
    tasks: list[CompareTask],
    src_snapshot: str,
    sample: bool = True,
) -> Prepared:
    """Resolve both sides, check keys, sample key boundaries on the source snapshot (not
    with ``sample`` false: a caller that reads given ranges needs no boundaries)."""
    with connect(dst_connstr, autocommit=True) as dst_conn:
        dests = [resolve_table(dst_conn, t.dest_table, describe(dst_connstr)) for t in tasks]
        return _prepare(src_connstr, dst_conn, tasks, src_snapshot, dests, sample)


def _prepare(
    src_connstr: str,
    dst_conn: psycopg.Connection,
    tasks: list[CompareTask],
    src_snapshot: str,
    dests: list[TableInfo],
    sample: bool,
) -> Prepared:
    conn = open_in_snapshot(src_connstr, src_snapshot)
    try:
        sources = [resolve_table(conn, t.source_table, describe(src_connstr)) for t in tasks]
        plans, boundaries = [], []
        for task, src, dst in zip(tasks, sources, dests, strict=True):
            key = _key(task, src, dst)
            have = set(dst.column_names) - set(task.exclude_columns)
            columns = tuple(c for c in src.column_names if c in have)
            by_type = all(src.column(c).type == dst.column(c).type for c in columns) and all(
                _hashable([src.column(c).type for c in columns], c_) for c_ in (conn, dst_conn)
            )
            plans.append(
                TablePlan(
                    Side(src.schema, src.name, task.copy_condition, src.partitioned),
                    Side(dst.schema, dst.name, task.dest_condition, dst.partitioned),
                    columns,
                    key,
                    by_type,
                )
            )
            # Without a key the table is one bucket: its row count and hash sum.
            boundaries.append(sample_boundaries(conn, src, key) if key.names and sample else [])
    except psycopg.Error as exc:
        raise DatabaseError(f"{describe(src_connstr)}: {error_text(exc)}") from None
    finally:
        conn.close()
    return Prepared(tasks, sources, dests, plans, boundaries)


def _key(task: CompareTask, src: TableInfo, dst: TableInfo) -> KeySpec:
    """The key rows are bucketed and joined by: the task's, else the primary key (the same
    on both sides)."""
    if task.key is None:
        key = KeySpec.of(src)
        if dst.require_pkey() != key.names:
            raise DatabaseError(
                f"primary keys differ: {src.display} ({', '.join(key.names)}) vs "
                f"{dst.display} ({', '.join(dst.pkey)})"
            )
        return key
    for table in (src, dst):
        missing = [n for n in task.key if n not in table.column_names]
        if missing:
            raise DatabaseError(f"{table.display} has no key column {missing[0]}")
    return KeySpec(task.key, tuple(src.column(n).type for n in task.key))


def _hashable(types: list[str], where: psycopg.Connection | str) -> bool:
    """Whether every type has an extended hash function, so whole rows can be hashed by type.

    That is about 3x cheaper than hashing the row's text, and it is what compare uses when
    both sides have identical column types; otherwise (json, point, differing types) the row's
    text form is hashed.  Probed on a row of NULLs, so empty tables answer too.
    """
    probe = sql.SQL("select hash_record_extended(row({}), 0)").format(
        sql.SQL(", ").join(sql.SQL("null::{}").format(sql.SQL(t)) for t in types)
    )
    if isinstance(where, str):
        with connect(where, autocommit=True) as conn:
            return _hashable(types, conn)
    try:
        with where.transaction():
            where.execute(probe)
        return True
    except psycopg.Error:
        return False


def bucket_groups(boundaries: list[list[Key]], group_buckets: int) -> list[BucketGroup]:
    """Per table, its buckets cut into groups of at most about ``group_buckets``."""
    groups: list[BucketGroup] = []
    for table_no, bounds in enumerate(boundaries):
        buckets = len(bounds) + 1
        count = max(1, math.ceil(buckets / group_buckets))
        size = math.ceil(buckets / count)
        for first in range(0, buckets, size):
            last = min(buckets, first + size)  # exclusive
            lower = bounds[first - 1] if first > 0 else None
            upper = bounds[last - 1] if last - 1 < len(bounds) else None
            groups.append(
                BucketGroup(table_no, first, lower, upper, tuple(bounds[first : last - 1]))
            )
    return groups
