"""Applying a planned segment on the subscriber, inside the caller's transaction.

Each table part's COPY data is loaded unchanged into a temporary stage table with the
destination's column types (:class:`StageTables`), then applied set-based: one
``DELETE ... USING`` for the deleted keys and one ``INSERT`` (``ON CONFLICT DO UPDATE``, or
a plain insert when the table saw only inserts).  TRUNCATE barriers come first, sequences
last; nothing here commits (the caller adds the tick record to the same transaction).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgferry.apply.batch_sql import Segment
from pgferry.apply.plan import ReplayError, SegmentPlan, TableWork
from pgferry.apply.read import ReaderPool, copy_options, table_parts
from pgferry.apply.routes import Route
from pgferry.db import error_text

log = logging.getLogger(__name__)


@dataclass
class ApplyStats:
    upserts: int = 0
    deletes: int = 0
    truncates: int = 0
    sequences: int = 0
    tables: set[str] = field(default_factory=set)
    spark: bool = False
    summary_seconds: float = 0.0  # the provider's summary of the batch
    apply_seconds: float = 0.0  # reading and applying, in the open transaction
    commit_seconds: float = 0.0

    def add(self, other: ApplyStats) -> None:
        self.upserts += other.upserts
        self.deletes += other.deletes
        self.truncates += other.truncates
        self.sequences += other.sequences
        self.tables |= other.tables


class StageTables:
    """Temporary stage tables of the applying connection, one per (table, columns).

    A stage has the destination's column types (created from it), so COPY parses each
    value once.  The cache belongs to one connection: :meth:`reset` when it changes or when
    a destination's shape may have changed (a replayed script).
    """

    def __init__(self) -> None:
        self._conn_id: int | None = None
        self._names: dict[tuple[str, tuple[str, ...], tuple[str, ...]], sql.Identifier] = {}

    def reset(self) -> None:
        self._names.clear()

    def get(
        self, conn: psycopg.Connection, route: Route, columns: tuple[str, ...]
    ) -> sql.Composable:
        if self._conn_id != id(conn):
            self._conn_id, self._names = id(conn), {}
        key = (route.dest_fq, columns, route.types)
        name = self._names.get(key)
        if name is None:
            name = sql.Identifier(f"ferry_stage_{len(self._names) + 1}")
            conn.execute(sql.SQL("drop table if exists pg_temp.{}").format(name))
            conn.execute(
                sql.SQL(
                    "create temp table {name} as select ''::\"char\" as op, {cols}"
                    " from {dest} with no data"
                ).format(
                    name=name,
                    cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
                    dest=route.dest,
                )
            )
            self._names[key] = name
        return sql.SQL("pg_temp.{}").format(name)


def load_stage(
    conn: psycopg.Connection, stage: sql.Composable, chunks: Iterable[bytes], binary: bool
) -> int:
    stmt = sql.SQL("copy {} from stdin" + copy_options(binary)).format(stage)
    with conn.cursor() as cur:
        with cur.copy(stmt) as dst:
            for chunk in chunks:
                dst.write(chunk)
        return max(cur.rowcount, 0)


def apply_table(
    conn: psycopg.Connection,
    stages: StageTables,
    work: TableWork,
    parts: Iterable[Iterable[bytes]],
) -> ApplyStats:
    """Load one table's rows (COPY data of one or more parts) into its stage and apply
    them (caller's transaction)."""
    route = work.route
    stats = ApplyStats()
    try:
        stats.deletes, stats.upserts = _apply_rows(conn, stages, work, parts)
    except psycopg.Error as exc:
        raise ReplayError(f"applying to {route.dest_text}: {error_text(exc)}") from None
    stats.tables.add(route.table_name)
    return stats


def _apply_rows(
    conn: psycopg.Connection,
    stages: StageTables,
    work: TableWork,
    parts: Iterable[Iterable[bytes]],
) -> tuple[int, int]:
    route, cols = work.route, work.columns
    deletes = upserts = 0
    stage = stages.get(conn, route, cols)
    # One COPY per part: a binary COPY stream has a header and an end marker of its own.
    staged = sum(load_stage(conn, stage, part, work.binary) for part in parts)
    if staged:
        pk = [sql.Identifier(c) for c in route.pk]
        deletes = conn.execute(
            sql.SQL(
                "delete from {dest} as t using {stage} as s where s.op = 'D' and ({tpk}) = ({spk})"
            ).format(
                dest=route.dest,
                stage=stage,
                tpk=sql.SQL(", ").join(sql.SQL("t.{}").format(c) for c in pk),
                spk=sql.SQL(", ").join(sql.SQL("s.{}").format(c) for c in pk),
            )
        ).rowcount
        if deletes < staged:
            upserts = _insert(conn, route, cols, stage, work.inserts_only)
    conn.execute(sql.SQL("truncate {}").format(stage))
    return deletes, upserts


def _insert(
    conn: psycopg.Connection,
    route: Route,
    cols: tuple[str, ...],
    stage: sql.Composable,
    inserts_only: bool,
) -> int:
    idents = [sql.Identifier(c) for c in cols]
    base = sql.SQL(
        "insert into {dest} as t ({cols}) overriding system value"
        " select {cols} from {stage} where op <> 'D'"
    ).format(dest=route.dest, cols=sql.SQL(", ").join(idents), stage=stage)
    if inserts_only:
        # Only inserts of this table in the batch: no key can exist here yet, unless the
        # table drifted; then the savepoint turns it back into the upsert.
        try:
            with conn.transaction():
                return conn.execute(base).rowcount
        except psycopg.errors.UniqueViolation:
            log.debug("%s: plain insert met existing keys, upserting", route.dest_text)
    rest = [sql.Identifier(c) for c in cols if c not in route.pk]
    if rest:
        action = sql.SQL("do update set {}").format(
            sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(c) for c in rest)
        )
    else:
        action = sql.SQL("do nothing")
    stmt = sql.SQL("{base} on conflict ({pk}) {action}").format(
        base=base,
        pk=sql.SQL(", ").join(sql.Identifier(c) for c in route.pk),
        action=action,
    )
    return conn.execute(stmt).rowcount


def apply_truncates(conn: psycopg.Connection, routes: Sequence[Route]) -> int:
    if routes:
        conn.execute(sql.SQL("truncate only {}").format(sql.SQL(", ").join(r.dest for r in routes)))
    return len(routes)


def apply_sequences(conn: psycopg.Connection, values: dict[str, int]) -> int:
    """Sequences never move backwards on a subscriber."""
    for seq_name, value in sorted(values.items()):
        conn.execute("select ferry.seq_advance(%s::regclass, %s)", (seq_name, value))
        conn.execute(
            """
            update ferry.seq_info set last_value = greatest(coalesce(last_value, %s), %s)
             where seq_name = %s and local
            """,
            (value, value, seq_name),
        )
    return len(values)


def apply_segment(
    conn: psycopg.Connection,
    stages: StageTables,
    plan: SegmentPlan,
    batch_sql: str,
    segment: Segment,
    *,
    provider: psycopg.Connection,
    readers: ReaderPool | None = None,
) -> ApplyStats:
    """Apply ``plan`` inside the caller's transaction on ``conn``.

    Rows are read by ``readers`` (threads, or Spark tasks, reading ahead of the apply) or,
    for small segments, inline on the worker's own ``provider`` connection
    (:func:`pgferry.apply.read.table_parts`).
    """
    stats = ApplyStats(truncates=apply_truncates(conn, plan.truncate))
    try:
        with table_parts(
            plan.tables, batch_sql, segment, provider=provider, readers=readers
        ) as parts:
            for work, chunks in parts:
                stats.add(apply_table(conn, stages, work, [chunks]))
    except psycopg.Error as exc:
        raise ReplayError(error_text(exc)) from None
    stats.sequences = apply_sequences(conn, plan.sequences)
    return stats
