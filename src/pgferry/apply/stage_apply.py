"""Applying a planned segment on the subscriber, inside the caller's transaction.

Each table part's COPY data is loaded unchanged into a temporary stage table with the
destination's column types (:class:`StageTables`), then applied set-based: one
``DELETE ... USING`` for the deleted keys and one ``INSERT`` (``ON CONFLICT DO UPDATE``, or
a plain insert when the table saw only inserts).  TRUNCATE barriers come first, sequences
last; nothing here commits (the caller adds the tick record to the same transaction).

Those statements also repair, silently, a subscriber that drifted: an update of a row
missing here inserts it, a delete of one finds nothing.  Both are counted per table
(:class:`ApplyStats`) and added to the node's totals by :func:`record_divergence`, so that
drift shows in ``status`` and the log instead of being hidden by the next change.
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
from pgferry.node import model

log = logging.getLogger(__name__)

# The ops of a stage row (see pgferry.apply.batch_sql.table_query).  'U' and 'D' are changes
# of a key the source had before the rows read: one missing here is divergence.  'I' and
# 'd' are the insert (possibly updated since) and the delete of a key inserted within the
# rows read, which the subscriber need not have had.
_DELETES = sql.SQL("s.op in ('D', 'd')")


@dataclass
class ApplyStats:
    upserts: int = 0
    deletes: int = 0
    truncates: int = 0
    sequences: int = 0
    recreated: int = 0  # rows an update inserted: the key was missing here
    missing_deletes: int = 0  # deletes whose key was missing here
    # Per destination table with either: (rows re-created, deletes that found no row).
    diverged: dict[str, tuple[int, int]] = field(default_factory=dict)
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
        self.recreated += other.recreated
        self.missing_deletes += other.missing_deletes
        for table, (rows, deletes) in other.diverged.items():
            had_rows, had_deletes = self.diverged.get(table, (0, 0))
            self.diverged[table] = (had_rows + rows, had_deletes + deletes)
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
    try:
        stats = _apply_rows(conn, stages, work, parts)
    except psycopg.Error as exc:
        raise ReplayError(f"applying to {route.dest_text}: {error_text(exc)}") from None
    stats.tables.add(route.table_name)
    if stats.recreated or stats.missing_deletes:
        stats.diverged[route.dest_text] = (stats.recreated, stats.missing_deletes)
    return stats


def _apply_rows(
    conn: psycopg.Connection,
    stages: StageTables,
    work: TableWork,
    parts: Iterable[Iterable[bytes]],
) -> ApplyStats:
    route, cols = work.route, work.columns
    stats = ApplyStats()
    stage = stages.get(conn, route, cols)
    # One COPY per part: a binary COPY stream has a header and an end marker of its own.
    staged = sum(load_stage(conn, stage, part, work.binary) for part in parts)
    if staged and (work.inserts_only or work.some_inserts or route.copy_condition):
        # Nothing to count.  Only inserts: no update or delete can miss a row.  Some
        # inserts: a key inserted in the batch arrives collapsed as 'U' or 'D', which
        # cannot be told from a row missing here, so only batches without inserts of the
        # table are counted.  A copy condition: its 'U' and 'D' stand for images entering
        # and leaving the condition, which the subscriber need not have had.
        stats.deletes = conn.execute(_delete(route, stage)).rowcount
        if stats.deletes < staged:
            stats.upserts = _insert(conn, route, cols, stage, work.inserts_only)
    elif staged:
        _apply_counted(conn, route, cols, stage, staged, stats)
    conn.execute(sql.SQL("truncate {}").format(stage))
    return stats


def _apply_counted(
    conn: psycopg.Connection,
    route: Route,
    cols: tuple[str, ...],
    stage: sql.Composable,
    staged: int,
    stats: ApplyStats,
) -> None:
    """The delete and the upsert, counting the rows they found missing here.

    The delete's statement also counts the stage's ops and reads how many rows this
    transaction has inserted into the table so far; a query sent with the upsert, in the
    same round trip, reads that number again.  What the upsert inserted beyond the 'I' rows
    are 'U' rows whose key was missing here.  RETURNING (xmax = 0) would say so row by row,
    but it costs about a tenth of the upsert and fails on a partitioned table.  The count
    is exact unless an 'I' row met a key that exists here in the same table and batch
    (that row is updated, and one re-created row goes uncounted).
    """
    inserted = _inserted_so_far(route)
    row = conn.execute(
        sql.SQL(
            "with d as ({delete} returning s.op)"
            " select (select count(*) from d), (select count(*) from d where op = 'D'),"
            " count(*) filter (where s.op = 'D'), count(*) filter (where {deletes}),"
            " count(*) filter (where s.op = 'I'), {inserted}"
            " from {stage} as s"
        ).format(delete=_delete(route, stage), deletes=_DELETES, inserted=inserted, stage=stage)
    ).fetchone()
    assert row is not None
    deleted, deleted_d, staged_d, staged_deletes, staged_i, before = row
    stats.deletes = deleted
    stats.missing_deletes = staged_d - deleted_d
    upserted = staged - staged_deletes
    if not upserted:
        return
    upsert = _upsert(route, cols, stage)
    if upserted == staged_i:  # no 'U' row: nothing can be re-created
        stats.upserts = conn.execute(upsert).rowcount
        return
    with conn.pipeline():  # both statements in one round trip, the upsert still prepared
        applied = conn.execute(upsert)
        read = conn.execute(sql.SQL("select {}").format(inserted))
    stats.upserts = applied.rowcount
    after = read.fetchone()
    assert after is not None
    stats.recreated = max(0, after[0] - before - staged_i)


def _inserted_so_far(route: Route) -> sql.Composable:
    """Rows this transaction has inserted into the destination so far, as the server's
    statistics count them while the transaction runs: a partitioned table's are its leaf
    partitions' (pg_partition_tree lists nothing for a table that is not partitioned)."""
    return sql.SQL(
        "(select coalesce(sum(pg_stat_get_xact_tuples_inserted(relid)),"
        " pg_stat_get_xact_tuples_inserted({rel}::regclass))::bigint"
        " from pg_partition_tree({rel}::regclass) where isleaf)"
    ).format(rel=sql.Literal(route.dest_fq))


def _delete(route: Route, stage: sql.Composable) -> sql.Composable:
    pk = [sql.Identifier(c) for c in route.pk]
    return sql.SQL(
        "delete from {dest} as t using {stage} as s where {deletes} and ({tpk}) = ({spk})"
    ).format(
        dest=route.dest,
        stage=stage,
        deletes=_DELETES,
        tpk=sql.SQL(", ").join(sql.SQL("t.{}").format(c) for c in pk),
        spk=sql.SQL(", ").join(sql.SQL("s.{}").format(c) for c in pk),
    )


def _insert_base(route: Route, cols: tuple[str, ...], stage: sql.Composable) -> sql.Composable:
    idents = [sql.Identifier(c) for c in cols]
    return sql.SQL(
        "insert into {dest} as t ({cols}) overriding system value"
        " select {cols} from {stage} as s where not ({deletes})"
    ).format(dest=route.dest, cols=sql.SQL(", ").join(idents), stage=stage, deletes=_DELETES)


def _upsert(route: Route, cols: tuple[str, ...], stage: sql.Composable) -> sql.Composable:
    rest = [sql.Identifier(c) for c in cols if c not in route.pk]
    if rest:
        action = sql.SQL("do update set {}").format(
            sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(c) for c in rest)
        )
    else:
        action = sql.SQL("do nothing")
    return sql.SQL("{base} on conflict ({pk}) {action}").format(
        base=_insert_base(route, cols, stage),
        pk=sql.SQL(", ").join(sql.Identifier(c) for c in route.pk),
        action=action,
    )


def _insert(
    conn: psycopg.Connection,
    route: Route,
    cols: tuple[str, ...],
    stage: sql.Composable,
    inserts_only: bool,
) -> int:
    if inserts_only:
        # Only inserts of this table in the batch: no key can exist here yet, unless the
        # table drifted; then the savepoint turns it back into the upsert.
        try:
            with conn.transaction():
                return conn.execute(_insert_base(route, cols, stage)).rowcount
        except psycopg.errors.UniqueViolation:
            log.debug("%s: plain insert met existing keys, upserting", route.dest_text)
    return conn.execute(_upsert(route, cols, stage)).rowcount


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


def record_divergence(
    conn: psycopg.Connection,
    queue: str,
    consumer: str,
    stats: ApplyStats,
    *,
    tick_id: int | None = None,
) -> None:
    """Add a batch's divergence to the node's totals, in the transaction that applied it
    (a batch that rolls back counts nothing), and log it in one line; nothing when the
    batch found none."""
    if not stats.recreated and not stats.missing_deletes:
        return
    tables = sorted(stats.diverged)
    model.add_divergence(
        conn, queue, consumer, stats.recreated, stats.missing_deletes, ", ".join(tables)
    )
    log.warning(
        "diverged%s: %s",
        f" at tick {tick_id}" if tick_id is not None else "",
        "; ".join(divergence_text(table, *stats.diverged[table]) for table in tables),
    )


def divergence_text(table: str, recreated: int, missing_deletes: int) -> str:
    """'re-created 3 rows of public.t missing here, 1 delete found no row'."""
    parts = []
    if recreated:
        parts.append(f"re-created {_rows(recreated)} of {table} missing here")
    if missing_deletes:
        deletes = f"{missing_deletes} delete{'s' if missing_deletes != 1 else ''}"
        where = "" if recreated else f" of {table}"
        parts.append(f"{deletes}{where} found no row")
    return ", ".join(parts)


def _rows(n: int) -> str:
    return f"{n} row{'s' if n != 1 else ''}"
