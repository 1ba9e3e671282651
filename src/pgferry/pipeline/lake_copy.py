"""Initial load of lake tables: one exported snapshot, Parquet files written by tasks, one
commit per table.

:func:`copy_to_lake` runs on the driver, like :func:`pgferry.pipeline.copy.copy_tables`:
it exports a snapshot on the source, splits each table into heap block ranges
(:func:`~pgferry.pipeline.copy.plan.block_ranges`) and runs one Spark job whose tasks
(:func:`load_group`, on the executors) import the snapshot, read their ranges with a
server-side cursor and write them as Parquet files straight into the lake table's
directory.  A task returns only the files' names and sizes; the driver then commits each
table's files in ONE lake commit (Delta add actions, Iceberg ``add_files``), which
replaces whatever the table held.  Rows never pass through the driver.

A load that fails or is killed commits nothing: the files it wrote are not part of the
table (vacuum removes them) and the copy, run again, writes the table anew.  Tables of at
most :data:`LOCAL_PAGES` pages are loaded by threads of the driver, without Spark.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from psycopg import sql

from pgferry import expressions
from pgferry.db import connect, describe
from pgferry.errors import DatabaseError, PgferryError, TableError
from pgferry.lake import formats
from pgferry.lake import spec as lake_spec
from pgferry.lake import types as lake_types
from pgferry.pipeline.copy import CopyResult, CopyTask
from pgferry.pipeline.copy.plan import block_ranges, task_groups
from pgferry.pipeline.copy.task import BlockRange
from pgferry.pipeline.snapshot import exported_snapshot, open_in_snapshot
from pgferry.pipeline.spark_errors import job_error
from pgferry.pipeline.tables import relation, resolve_table

log = logging.getLogger(__name__)

LOCAL_PAGES = 1000  # as the copy's: smaller loads run on the driver's threads
DRIVER_SLOTS = 2
FETCH_ROWS = 20_000  # rows per fetch of a task's cursor
FILE_ROWS = 1_000_000  # rows per Parquet file at most


@dataclass(frozen=True)
class LakePlan:
    """What a task needs to load ranges of one table (plain, picklable values)."""

    dest_key: str
    src_schema: str
    src_name: str
    columns: tuple[lake_types.LakeColumn, ...]
    condition: str | None
    tid_ranges: bool
    spec: lake_spec.LakeSpec
    settings: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LakeJob:
    src_connstr: str
    snapshot_id: str
    plans: tuple[LakePlan, ...]
    file_rows: int = FILE_ROWS


def copy_to_lake(
    spark,  # a SparkSession, or a callable that returns one (started only when needed)
    src_connstr: str,
    local_connstr: str,
    tasks: list[CopyTask],
    specs: list[lake_spec.LakeSpec],
    *,
    max_parallel: int | None = None,
    on_totals: Callable[[dict[str, int | None]], None] | None = None,
    cancelled: threading.Event | None = None,
) -> CopyResult:
    """Load ``tasks`` into their lake tables (``specs``) under ONE exported snapshot; the
    local database (``local_connstr``) holds each table's shape."""
    started = time.monotonic()
    with exported_snapshot(src_connstr) as snap:
        with connect(src_connstr, autocommit=True) as conn:
            sources = [resolve_table(conn, t.source_table, describe(src_connstr)) for t in tasks]
        with connect(local_connstr, autocommit=True) as conn:
            shapes = [lake_types.table_columns(conn, t.dest_table) for t in tasks]
        session = None
        if sum(s.pages for s in sources) > LOCAL_PAGES:
            session = spark() if callable(spark) else spark
        slots = DRIVER_SLOTS if session is None else session.sparkContext.defaultParallelism
        plans, ranges = [], []
        for plan_no, (task, src, shape, spec) in enumerate(
            zip(tasks, sources, shapes, specs, strict=True)
        ):
            have = set(src.column_names) - set(task.exclude_columns)
            columns = tuple(c for c in shape if c.name in have)
            if not columns:
                raise TableError(f"{src.display} and its lake table have no column in common")
            tid = not src.partitioned
            plans.append(LakePlan(task.dest_table, src.schema, src.name, columns,
                                  task.copy_condition, tid, spec, task.settings))  # fmt: skip
            for range_no, (lo, hi) in enumerate(block_ranges(src.pages if tid else 0, slots)):
                blocks = (src.pages if hi is None else hi) - (lo or 0)
                ranges.append(BlockRange(plan_no, range_no, lo, hi, max(1, blocks)))
        if on_totals is not None:
            on_totals({t.dest_table: s.est_rows if s.est_rows > 0 else None
                       for t, s in zip(tasks, sources, strict=True)})  # fmt: skip
        job = LakeJob(src_connstr, snap.snapshot_id, tuple(plans), FILE_ROWS)
        groups = task_groups(ranges, slots, max_parallel)
        if session is None:
            written = _run_on_driver(job, groups)
        else:
            written = run_groups(session, job, groups, cancelled)
    result = CopyResult(snapshot=snap.txid_snapshot, rows={t.dest_table: 0 for t in tasks})
    for plan_no, plan in enumerate(plans):
        files = [(path, size, count) for n, path, size, count in written if n == plan_no]
        rows = sum(count for n, _, _, count in written if n == plan_no)
        module = formats.module(plan.spec.format)
        module.commit_files(plan.spec, files, lake_types.arrow_schema(plan.columns), 0)
        result.rows[plan.dest_key] = rows
        log.info("lake load %s: %d rows in %d files", plan.dest_key, rows, len(files))
    result.seconds = time.monotonic() - started
    return result


def _run_on_driver(job: LakeJob, groups: list[list[BlockRange]]) -> list[tuple]:
    with ThreadPoolExecutor(len(groups), thread_name_prefix="pgferry-lake-load") as pool:
        outcomes = [pool.submit(load_group, job, group) for group in groups]
    errors = [f.exception() for f in outcomes if f.exception() is not None]
    if errors:
        raise DatabaseError(f"lake load failed: {errors[0]}")
    return [entry for f in outcomes for entry in f.result()]


def run_groups(spark, job: LakeJob, groups, cancelled: threading.Event | None) -> list[tuple]:
    sc = spark.sparkContext
    try:
        sc.setJobDescription("pgferry lake load")
        # The lambda is pickled by value, load_group by reference (the workers import it).
        done = sc.parallelize(groups, len(groups)).map(lambda g: load_group(job, g)).collect()
    except PgferryError:
        raise
    except Exception as exc:
        if cancelled is not None and cancelled.is_set():
            raise PgferryError("lake load cancelled") from None
        raise DatabaseError(f"lake load failed: {job_error(exc)}") from None
    return [entry for files in done for entry in files]


def load_group(job: LakeJob, ranges: list[BlockRange]) -> list[tuple[int, str, int, int]]:
    """Write each range as Parquet files into its lake table's directory; returns
    (plan number, path relative to the table, bytes, rows) per file.  The task's body."""
    conn = open_in_snapshot(job.src_connstr, job.snapshot_id)
    try:
        return [entry for rng in ranges for entry in _load_range(job, rng, conn)]
    finally:
        conn.close()


def _load_range(job: LakeJob, rng: BlockRange, conn) -> list[tuple[int, str, int, int]]:
    plan = job.plans[rng.plan_no]
    module = formats.module(plan.spec.format)
    schema = lake_types.arrow_schema(plan.columns)
    where: list[sql.Composable] = []
    if plan.tid_ranges and rng.lo_block is not None:
        where.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({rng.lo_block},0)")))
    if plan.tid_ranges and rng.hi_block is not None:
        where.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({rng.hi_block},0)")))
    if plan.condition:
        where.append(expressions.as_sql(plan.condition))
    query = _select(plan, where, [c.select() for c in plan.columns])
    for name, value in plan.settings:
        conn.execute("select set_config(%s, %s, true)", (name, value))
    directory = module.data_dir(plan.spec)
    os.makedirs(directory, exist_ok=True)
    files = _Files(directory, rng, schema, job.file_rows, module.new_file_name)
    if lake_types.csv_ready(plan.columns):
        # PostgreSQL's CSV text parsed by Arrow's reader: no Python object per value.
        text = sql.SQL("copy ({}) to stdout (format csv)").format(
            _select(plan, where, [lake_types.csv_select(c) for c in plan.columns])
        )
        with conn.cursor() as cur, cur.copy(text) as copy:
            for batch in lake_types.csv_tables(copy, plan.columns, schema):
                files.write(batch)
    else:
        with conn.cursor(name=f"pgferry_lake_{rng.plan_no}_{rng.range_no}") as cur:
            cur.execute(query)
            while batch := cur.fetchmany(min(FETCH_ROWS, job.file_rows)):
                files.write(lake_types.rows_to_arrow(plan.columns, batch, schema))
    return files.close()


def _select(plan: LakePlan, where: list, values: list) -> sql.Composable:
    query = sql.SQL("select {} from {}").format(
        sql.SQL(", ").join(values), relation(plan.src_schema, plan.src_name, not plan.tid_ranges)
    )
    return sql.SQL("{} where {}").format(query, sql.SQL(" and ").join(where)) if where else query


class _Files:
    """Parquet files of one range, a new one every ``file_rows`` rows."""

    def __init__(self, directory, rng: BlockRange, schema, file_rows: int, name) -> None:
        self.directory, self.rng, self.schema = directory, rng, schema
        self.file_rows, self.name = file_rows, name
        self.writer, self.path, self.rows = None, "", 0
        self.done: list[tuple[int, str, int, int]] = []

    def write(self, table) -> None:
        import pyarrow.parquet as pq

        while table.num_rows:
            if self.writer is None:
                self.path = self.name(self.rng.range_no)
                self.writer = pq.ParquetWriter(os.path.join(self.directory, self.path),
                                               self.schema)  # fmt: skip
            room = self.file_rows - self.rows
            self.writer.write_table(table.slice(0, room))
            self.rows += min(room, table.num_rows)
            table = table.slice(room)
            if self.rows >= self.file_rows:
                self._finish()

    def _finish(self) -> None:
        assert self.writer is not None
        self.writer.close()
        size = os.path.getsize(os.path.join(self.directory, self.path))
        self.done.append((self.rng.plan_no, self.path, size, self.rows))
        self.writer, self.rows = None, 0

    def close(self) -> list[tuple[int, str, int, int]]:
        if self.writer is not None:
            self._finish()
        return self.done
