"""Initial load of lake tables: one exported snapshot, Parquet files written by tasks, one
commit per table.

:func:`copy_to_lake` runs on the driver, like :func:`pgferry.pipeline.copy.copy_tables`:
it exports a snapshot on the source, splits each table into heap block ranges (a multiple
of the task slots, so that the tasks get equal shares) and runs one Spark job whose tasks
(:func:`.lake_load.load_group`, on the executors) import the snapshot, read their ranges
and write them as Parquet files straight into the lake table's directory.  A task returns
only the files' names and sizes; the driver then commits each table's files in ONE lake
commit (Delta add actions, Iceberg ``add_files``), which replaces whatever the table held.
Rows never pass through the driver.  Which columns get a Parquet dictionary is decided
here, from the source's statistics (:func:`dictionary_columns`).

A load that fails or is killed commits nothing: the files it wrote are not part of the
table (vacuum removes them) and the copy, run again, writes the table anew.  Tables of at
most :data:`LOCAL_PAGES` pages are loaded by threads of the driver, without Spark.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pgferry.db import connect, describe
from pgferry.errors import DatabaseError, PgferryError, TableError
from pgferry.lake import formats, storage
from pgferry.lake import spec as lake_spec
from pgferry.lake import types as lake_types
from pgferry.pipeline.copy import CopyResult, CopyTask
from pgferry.pipeline.copy.plan import RANGE_BLOCKS, block_ranges, task_groups
from pgferry.pipeline.copy.task import BlockRange
from pgferry.pipeline.lake_load import LakeJob, LakePlan, load_group
from pgferry.pipeline.snapshot import exported_snapshot
from pgferry.pipeline.spark_connect import is_connect_session
from pgferry.pipeline.spark_errors import job_error
from pgferry.pipeline.tables import TableInfo, resolve_table

__all__ = ["LakeJob", "LakePlan", "copy_to_lake", "load_group", "run_groups"]

log = logging.getLogger(__name__)

# Smaller loads run on the driver's threads: 1,000,000 rows (10,310 pages) took as long
# there as on a running local Spark (1.1 s against 1.2 s, BENCHMARKS.md), and a Spark
# not yet running costs far more to start.  A thread holds a few pieces at a time.
LOCAL_PAGES = 16_384
DRIVER_SLOTS = 2
FILE_ROWS = 1_000_000  # rows per Parquet file at most
# A column gets a Parquet dictionary when its statistics say that a value repeats this
# often on average: on unique values Arrow builds a dictionary only to drop it.
DICTIONARY_REPEATS = 4


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
            repeats = [dictionary_columns(conn, src) for src in sources]
        with connect(local_connstr, autocommit=True) as conn:
            shapes = [lake_types.table_columns(conn, t.dest_table) for t in tasks]
        session = None
        if sum(s.pages for s in sources) > LOCAL_PAGES:
            session = spark() if callable(spark) else spark
            if session is not None and is_connect_session(session):
                # A Spark Connect client runs no Python function of ours on executors
                # that see the lake: the load's tasks run on this process's threads.
                log.info("lake load on this process's threads: a Spark Connect session"
                         " cannot run its tasks")  # fmt: skip
                session = None
        slots = DRIVER_SLOTS if session is None else session.sparkContext.defaultParallelism
        plans, ranges = [], []
        for plan_no, (task, src, shape, spec, repeated) in enumerate(
            zip(tasks, sources, shapes, specs, repeats, strict=True)
        ):
            have = set(src.column_names) - set(task.exclude_columns)
            columns = tuple(c for c in shape if c.name in have)
            if not columns:
                raise TableError(f"{src.display} and its lake table have no column in common")
            tid = not src.partitioned
            plans.append(LakePlan(task.dest_table, src.schema, src.name, columns,
                                  task.copy_condition, tid, spec, task.settings,
                                  repeated))  # fmt: skip
            for range_no, (lo, hi) in enumerate(even_ranges(src.pages if tid else 0, slots)):
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


def even_ranges(pages: int, slots: int) -> list[tuple[int | None, int | None]]:
    """Block ranges of a table (:func:`~.copy.plan.block_ranges`), a multiple of ``slots``
    of them when the table is split at all: three ranges on two tasks would leave one
    task a third of the table to read alone at the end."""
    per_slot = math.ceil(pages / (RANGE_BLOCKS * max(1, slots)))
    return block_ranges(pages, max(1, slots) * max(1, per_slot))


def dictionary_columns(conn, src: TableInfo) -> tuple[str, ...] | None:
    """The source's columns whose values repeat at least :data:`DICTIONARY_REPEATS` times
    on average by its statistics, and those without statistics; None when the table has
    none (every column then tries a dictionary, Arrow's default)."""
    rows = conn.execute(
        "select attname, n_distinct from pg_stats"
        " where schemaname = %s and tablename = %s and inherited = %s",
        (src.schema, src.name, src.partitioned),
    ).fetchall()
    if not rows or src.est_rows <= 0:
        return None
    distinct = {name: n if n >= 0 else -n * src.est_rows for name, n in rows}
    return tuple(
        name for name in src.column_names
        if name not in distinct or distinct[name] * DICTIONARY_REPEATS <= src.est_rows
    )  # fmt: skip


def _run_on_driver(job: LakeJob, groups: list[list[BlockRange]]) -> list[tuple]:
    with ThreadPoolExecutor(len(groups), thread_name_prefix="pgferry-lake-load") as pool:
        outcomes = [pool.submit(load_group, job, group) for group in groups]
    errors = [f.exception() for f in outcomes if f.exception() is not None]
    if errors:
        raise DatabaseError(f"lake load failed: {_masked(job, str(errors[0]))}")
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
        raise DatabaseError(f"lake load failed: {_masked(job, job_error(exc))}") from None
    return [entry for files in done for entry in files]


def _masked(job: LakeJob, text: str) -> str:
    """``text`` without the secrets of the job's object stores."""
    for plan in job.plans:
        text = storage.mask(text, plan.spec.storage)
    return text
