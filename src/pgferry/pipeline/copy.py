"""Initial copy: many tables, one exported snapshot, parallel Spark tasks, COPY streams.

Each source table is split into heap block ranges (``ctid`` TID range scans work for any key
type).  The ranges are shared out among as many Spark tasks as can run at once, balanced by
size.  A task imports the snapshot on the source and copies its ranges one after another: it
streams ``COPY (select ...) TO STDOUT`` straight into ``COPY ... FROM STDIN`` on the
destination (bytes are passed through, never parsed), and in the SAME destination transaction
records the range in ``ferry_copy.range_done``.  That record is inserted first, so a retried or
duplicated task either waits for the first one and then skips the range, or redoes a range
whose first attempt rolled back: rows are never duplicated nor lost.

The destination is prepared by the driver (TRUNCATE unless ``skip_truncate``; secondary indexes
dropped and rebuilt afterwards), rows are loaded with ``session_replication_role = replica``
(no triggers, no FK checks: tables of one copy load in any order), and ANALYZE runs at the end.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from pgferry import copyio, expressions
from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError, PgferryError, TableError
from pgferry.pipeline.progress import TableProgress
from pgferry.pipeline.snapshot import exported_snapshot, open_in_snapshot
from pgferry.pipeline.spark import job_error
from pgferry.pipeline.tables import TableInfo, common_columns, relation, resolve_table

log = logging.getLogger(__name__)

# A range of this many 8 kB blocks (32 MB) is big enough that per-task overhead is noise.
RANGE_BLOCKS = 4096
# Below this a table is not worth splitting for parallelism.
MIN_SPLIT_BLOCKS = 512
JOB_RETRIES = 2
# Objects with a lower oid are built in: the same in every database of one major version.
FIRST_USER_OID = 16384

_BOOKKEEPING_SQL = """
create schema if not exists ferry_copy;
create table if not exists ferry_copy.range_done (
    copy_id     text    not null,
    dest_table  text    not null,
    range_no    integer not null,
    rows        bigint  not null default 0,
    done_at     timestamptz not null default now(),
    primary key (copy_id, dest_table, range_no)
);
create table if not exists ferry_copy.saved_index (
    dest_table  text not null,
    index_name  text not null,
    index_def   text not null,
    saved_at    timestamptz not null default now(),
    primary key (dest_table, index_name)
);
"""


@dataclass(frozen=True)
class CopyTask:
    """One table to copy."""

    source_table: str  # 'schema.table' (as format('%I.%I') prints it)
    dest_table: str  # local name, may differ (other schema/table)
    copy_condition: str | None = None  # WHERE expression evaluated on the source table
    skip_truncate: bool = False


@dataclass
class CopyResult:
    snapshot: str  # pg_current_snapshot()::text of the exporting transaction
    rows: dict[str, int] = field(default_factory=dict)  # rows copied per dest_table
    seconds: float = 0.0


@dataclass(frozen=True)
class _TablePlan:
    """What an executor needs to copy ranges of one table (plain, picklable values)."""

    dest_key: str  # the task's dest_table as given: the key of CopyResult.rows
    src_schema: str
    src_name: str
    dst_schema: str
    dst_name: str
    columns: tuple[str, ...]
    condition: str | None
    tid_ranges: bool  # False for partitioned sources (no heap of their own)
    binary: bool = False  # COPY in binary format: same built-in types on both sides


@dataclass(frozen=True)
class _Unit:
    plan_no: int
    range_no: int
    lo_block: int | None
    hi_block: int | None  # None: open-ended, so rows in blocks added since sizing still count
    blocks: int = 0  # heap blocks in the range when sized: what balances the tasks


@dataclass(frozen=True)
class _Job:
    src_connstr: str
    dst_connstr: str
    snapshot_id: str
    copy_id: str
    plans: tuple[_TablePlan, ...]
    fail_once: str | None = None  # test hook: "DIR:stage", see _maybe_fail


def copy_tables(
    spark,
    src_connstr: str,
    dst_connstr: str,
    tasks: list[CopyTask],
    *,
    max_parallel: int | None = None,
    progress: bool | None = None,
    _fail_once: str | None = None,
) -> CopyResult:
    """Copy ``tasks`` from source to destination under ONE exported snapshot.

    Returns the snapshot (for the replay hand-over) and the rows copied per dest_table.
    ``_fail_once`` is a test hook making the first attempt of every table's first range fail.
    """
    if not tasks:
        raise PgferryError("copy: no tables given")
    started = time.monotonic()
    copy_id = uuid.uuid4().hex
    with exported_snapshot(src_connstr) as snap:
        with connect(src_connstr, autocommit=True) as conn:
            sources = [resolve_table(conn, t.source_table, describe(src_connstr)) for t in tasks]
            src_major = conn.info.server_version // 10000
        with connect(dst_connstr, autocommit=True) as conn:
            dests = [resolve_table(conn, t.dest_table, describe(dst_connstr)) for t in tasks]
            same_major = conn.info.server_version // 10000 == src_major
        plans, units = _plan(
            tasks, sources, dests, spark.sparkContext.defaultParallelism, binary=same_major
        )
        job = _Job(src_connstr, dst_connstr, snap.snapshot_id, copy_id, tuple(plans), _fail_once)
        _prepare_destination(dst_connstr, tasks, dests)
        prepared_at = time.monotonic()
        totals = _estimates(tasks, sources)
        with TableProgress(
            "copy", totals, lambda: _done_rows(dst_connstr, copy_id), enabled=progress
        ):
            _run_units(spark, job, units, max_parallel)
        copied_at = time.monotonic()
        rows = _done_rows(dst_connstr, copy_id)
    _finish_destination(dst_connstr, dests, copy_id)
    log.debug(
        "copy timings: prepare %.2fs, %d ranges %.2fs, finish %.2fs",
        prepared_at - started, len(units), copied_at - prepared_at,
        time.monotonic() - copied_at,
    )  # fmt: skip
    result = CopyResult(snapshot=snap.txid_snapshot, rows={t.dest_table: 0 for t in tasks})
    result.rows.update(rows)
    result.seconds = time.monotonic() - started
    for table, count in result.rows.items():
        log.info("copy %s: %d rows", table, count)
    return result


def _plan(
    tasks: list[CopyTask],
    sources: list[TableInfo],
    dests: list[TableInfo],
    parallelism: int,
    binary: bool = False,
) -> tuple[list[_TablePlan], list[_Unit]]:
    """Per table what to copy; ``binary``: the servers may exchange binary COPY data."""
    plans: list[_TablePlan] = []
    units: list[tuple[int, _Unit]] = []
    for plan_no, (task, src, dst) in enumerate(zip(tasks, sources, dests, strict=True)):
        columns = common_columns(src, dst)
        if not columns:
            raise TableError(f"{src.display} and {dst.display} have no column in common")
        skipped = sorted(set(src.column_names) - set(columns))
        if skipped:
            log.info("copy %s: ignoring source columns %s", task.dest_table, ", ".join(skipped))
        tid = not src.partitioned
        plans.append(
            _TablePlan(
                task.dest_table,
                src.schema,
                src.name,
                dst.schema,
                dst.name,
                columns,
                task.copy_condition,
                tid,
                binary and binary_compatible(src, dst, columns),
            )
        )
        for range_no, (lo, hi) in enumerate(block_ranges(src.pages if tid else 0, parallelism)):
            blocks = (src.pages if hi is None else hi) - (lo or 0)
            units.append((src.pages, _Unit(plan_no, range_no, lo, hi, max(1, blocks))))
    # Biggest tables first: the last tasks to start are then the short ones.
    units.sort(key=lambda item: -item[0])
    return plans, [u for _, u in units]


def binary_compatible(src: TableInfo, dst: TableInfo, columns: tuple[str, ...]) -> bool:
    """Whether ``columns`` can travel in binary COPY format (servers of one major version).

    Binary COPY is stricter than text: each value must be read as exactly the type it was
    written as, and arrays and composites carry their element types' oids, which only
    built-in types share between databases.
    """
    for name in columns:
        a, b = src.column(name), dst.column(name)
        if a.type != b.type or a.type_oid != b.type_oid or not 0 < a.type_oid < FIRST_USER_OID:
            return False
    return True


def block_ranges(pages: int, parallelism: int = 1) -> list[tuple[int | None, int | None]]:
    """Split ``pages`` heap blocks into ranges; the first starts at 0, the last is open."""
    if pages <= MIN_SPLIT_BLOCKS:
        return [(None, None)]
    count = max(math.ceil(pages / RANGE_BLOCKS), min(parallelism, pages // MIN_SPLIT_BLOCKS))
    step = math.ceil(pages / count)
    bounds = list(range(0, pages, step))
    return [
        (None if i == 0 else lo, None if i == len(bounds) - 1 else bounds[i + 1])
        for i, lo in enumerate(bounds)
    ]


def _estimates(tasks: list[CopyTask], sources: list[TableInfo]) -> dict[str, int | None]:
    return {
        t.dest_table: (s.est_rows if s.est_rows > 0 and not t.copy_condition else None)
        for t, s in zip(tasks, sources, strict=True)
    }


def _prepare_destination(dst_connstr: str, tasks: list[CopyTask], dests: list[TableInfo]) -> None:
    """Bookkeeping tables, then TRUNCATE and drop secondary indexes, in one transaction."""
    try:
        with connect(dst_connstr, autocommit=True) as conn:
            # A concurrent first copy may create the same objects: serialise on a lock.
            with conn.transaction():
                conn.execute("select pg_advisory_xact_lock(hashtext('ferry_copy.bookkeeping'))")
                conn.execute(_BOOKKEEPING_SQL)
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


def _finish_destination(dst_connstr: str, dests: list[TableInfo], copy_id: str) -> None:
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


def _done_rows(dst_connstr: str, copy_id: str) -> dict[str, int]:
    with connect(dst_connstr, autocommit=True) as conn:
        rows = conn.execute(
            "select dest_table, sum(rows)::bigint from ferry_copy.range_done"
            " where copy_id = %s group by dest_table",
            (copy_id,),
        ).fetchall()
    return {table: int(count) for table, count in rows}


def task_groups(units: list[_Unit], slots: int, max_parallel: int | None) -> list[list[_Unit]]:
    """The units as one Spark task per slot that may run at once, balanced by size.

    Spark runs at most ``slots`` tasks at a time (``max_parallel`` lowers that), and every
    task costs tens of milliseconds of scheduling and a new pair of connections, so one task
    per slot copies its ranges one after another.  The biggest range goes to the least
    loaded task first; each task keeps its ranges biggest first.
    """
    count = min(len(units), max(1, slots), max_parallel or len(units))
    groups: list[list[_Unit]] = [[] for _ in range(max(1, count))]
    loads = [0] * len(groups)
    for unit in sorted(units, key=lambda u: -u.blocks):
        least = loads.index(min(loads))
        groups[least].append(unit)
        loads[least] += unit.blocks
    return [g for g in groups if g]


def _run_units(spark, job: _Job, units: list[_Unit], max_parallel: int | None) -> None:
    """Run the Spark job; when it fails, run it again: finished ranges are skipped."""
    sc = spark.sparkContext
    groups = task_groups(units, sc.defaultParallelism, max_parallel)
    for attempt in range(JOB_RETRIES + 1):
        try:
            sc.setJobDescription("pgferry copy")
            sc.parallelize(groups, len(groups)).map(lambda g: _copy_group(job, g)).collect()
            return
        except PgferryError:
            raise
        except Exception as exc:
            message = job_error(exc)
            if attempt == JOB_RETRIES:
                raise DatabaseError(f"copy failed: {message}") from None
            log.warning("copy job failed (%s); retrying unfinished ranges", message)


def _copy_group(job: _Job, units: list[_Unit]) -> int:
    """Copy ranges one after another (runs on an executor); returns their row count.

    One source connection (its transaction in the snapshot) and one destination connection
    (a transaction per range) serve all of them.
    """
    src = open_in_snapshot(job.src_connstr, job.snapshot_id)
    try:
        dst = connect(job.dst_connstr)
        try:
            return sum(_copy_unit(job, unit, src, dst) for unit in units)
        finally:
            dst.close()
    finally:
        src.close()


def copy_range(job: _Job, unit: _Unit) -> int:
    """Copy one range (runs on an executor); returns its row count."""
    return _copy_group(job, [unit])


def _copy_unit(job: _Job, unit: _Unit, src: psycopg.Connection, dst: psycopg.Connection) -> int:
    plan = job.plans[unit.plan_no]
    try:
        return _copy_range(job, plan, unit, src, dst)
    except psycopg.Error as exc:
        raise DatabaseError(
            f"copy {plan.dest_key} range {unit.range_no}: {error_text(exc)}"
        ) from None


def _copy_range(
    job: _Job, plan: _TablePlan, unit: _Unit, src: psycopg.Connection, dst: psycopg.Connection
) -> int:
    cols = sql.SQL(", ").join(map(sql.Identifier, plan.columns))
    where: list[sql.Composable] = []
    if plan.tid_ranges and unit.lo_block is not None:
        where.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({unit.lo_block},0)")))
    if plan.tid_ranges and unit.hi_block is not None:
        where.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({unit.hi_block},0)")))
    if plan.condition:
        where.append(expressions.as_sql(plan.condition))
    select = sql.SQL("select {} from {}").format(
        cols, relation(plan.src_schema, plan.src_name, not plan.tid_ranges)
    )
    if where:
        select = sql.SQL("{} where {}").format(select, sql.SQL(" and ").join(where))
    # Binary: about a fifth less work for both servers than text (no parsing of numbers,
    # times, addresses) where both sides hold the same built-in types.
    fmt = sql.SQL(" (format binary)" if plan.binary else "")
    copy_out = sql.SQL("copy ({}) to stdout{}").format(select, fmt)
    copy_in = sql.SQL("copy {} ({}) from stdin{}").format(
        sql.Identifier(plan.dst_schema, plan.dst_name), cols, fmt
    )
    with dst.transaction():
        dst.execute("set local session_replication_role = replica")
        # Claim the range first: a concurrent duplicate blocks here until we finish, then
        # sees our row and skips; if we roll back, it copies the range itself.
        claimed = dst.execute(
            "insert into ferry_copy.range_done (copy_id, dest_table, range_no)"
            " values (%s, %s, %s) on conflict do nothing returning 1",
            (job.copy_id, plan.dest_key, unit.range_no),
        ).fetchone()
        if claimed is None:
            return 0
        with src.cursor() as scur, dst.cursor() as dcur:
            # closing(): the reader thread is finished before the COPY ends, even on error.
            with (
                scur.copy(copy_out) as out,
                dcur.copy(copy_in) as inp,
                contextlib.closing(copyio.gather_in_thread(out)) as chunks,
            ):
                for chunk in chunks:
                    inp.write(chunk)
                    _maybe_fail(job, plan, unit, "mid")
            rows = dcur.rowcount
        _maybe_fail(job, plan, unit, "mid")
        dst.execute(
            "update ferry_copy.range_done set rows = %s, done_at = now()"
            " where copy_id = %s and dest_table = %s and range_no = %s",
            (rows, job.copy_id, plan.dest_key, unit.range_no),
        )
    _maybe_fail(job, plan, unit, "after")
    return rows


def _maybe_fail(job: _Job, plan: _TablePlan, unit: _Unit, stage: str) -> None:
    """Test hook: fail the first attempt of range 0 of every table at ``stage``.

    ``mid`` fails inside the destination transaction (rows written, not committed); ``after``
    fails once the range is committed, before the task reports success.
    """
    if not job.fail_once or unit.range_no != 0:
        return
    folder, _, want = job.fail_once.rpartition(":")
    if want != stage:
        return
    marker = Path(folder) / f"{plan.dest_key.replace('/', '_')}.{stage}"
    if marker.exists():
        return
    marker.write_text(str(os.getpid()))
    raise RuntimeError(f"injected failure ({stage}) in {plan.dest_key} range 0")
