"""Initial copy: many tables, one exported snapshot, parallel Spark tasks, COPY streams.

:func:`copy_tables` runs on the driver: it exports the snapshot on the source and keeps it
open, plans block ranges per table (:mod:`.plan`), prepares the destination
(:mod:`.destination`: bookkeeping, TRUNCATE, secondary indexes dropped), runs one Spark job
whose tasks copy the ranges (:mod:`.task`, on the executors; what they receive is pickled),
then rebuilds the indexes and ANALYZEs.  Each range is recorded in
``ferry_copy.range_done`` in the transaction that copies it, so when the job fails it is
simply run again: finished ranges are skipped, rows are never duplicated nor lost.

Tables of at most :data:`LOCAL_PAGES` pages in all are copied by threads of the driver
running the same task code, without starting Spark (``spark`` may be a function that
returns the session, called only when it is needed).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pgferry.db import connect, describe
from pgferry.errors import DatabaseError, PgferryError
from pgferry.pipeline.copy.destination import done_rows, finish_destination, prepare_destination
from pgferry.pipeline.copy.keys import copied_key
from pgferry.pipeline.copy.plan import CopyTask, block_ranges, estimates, plan_tables, task_groups
from pgferry.pipeline.copy.task import BlockRange, CopyJob, copy_group
from pgferry.pipeline.progress import TableProgress
from pgferry.pipeline.snapshot import exported_snapshot
from pgferry.pipeline.spark_errors import job_error
from pgferry.pipeline.tables import resolve_table

__all__ = ["CopyResult", "CopyTask", "block_ranges", "copy_tables", "task_groups"]

log = logging.getLogger(__name__)

JOB_RETRIES = 2
# Tables of at most this many 8 kB pages in all (~8 MB, the same bound as compare's) are
# copied on the driver: a Spark job's start (seconds, a JVM of a few hundred MB) would cost
# more than the copy, whose work is done by the two servers either way.
LOCAL_PAGES = 1000
DRIVER_SLOTS = 2  # threads of the driver copying ranges at once


@dataclass
class CopyResult:
    snapshot: str  # pg_current_snapshot()::text of the exporting transaction
    rows: dict[str, int] = field(default_factory=dict)  # rows copied per dest_table
    seconds: float = 0.0


def copy_tables(
    spark,  # a SparkSession, or a callable that returns one (started only when needed)
    src_connstr: str,
    dst_connstr: str,
    tasks: list[CopyTask],
    *,
    max_parallel: int | None = None,
    progress: bool | None = None,
    copy_id: str | None = None,
    on_totals: Callable[[dict[str, int | None]], None] | None = None,
    on_snapshot: Callable[[str], None] | None = None,
    cancelled: threading.Event | None = None,
) -> CopyResult:
    """Copy ``tasks`` from source to destination under ONE exported snapshot.

    Returns the snapshot (for the replay hand-over) and the rows copied per dest_table.
    ``copy_id`` names the job's rows in ``ferry_copy.range_done`` (where progress can be
    read while it runs); ``on_totals`` receives the estimated rows per dest_table once
    planned.  ``on_snapshot`` receives the exported snapshot's id before the destination
    is touched (to read the source as the copy sees it; raising stops the copy).
    ``cancelled`` set (and the job cancelled in Spark) ends the copy with an
    error instead of a retry.
    """
    if not tasks:
        raise PgferryError("copy: no tables given")
    started = time.monotonic()
    copy_id = copy_id or uuid.uuid4().hex
    with exported_snapshot(src_connstr) as snap:
        if on_snapshot is not None:
            on_snapshot(snap.snapshot_id)
        with connect(src_connstr, autocommit=True) as conn:
            sources = [resolve_table(conn, t.source_table, describe(src_connstr)) for t in tasks]
            src_major = conn.info.server_version // 10000
        with connect(dst_connstr, autocommit=True) as conn:
            dests = [resolve_table(conn, t.dest_table, describe(dst_connstr)) for t in tasks]
            same_major = conn.info.server_version // 10000 == src_major
        session = None
        if sum(src.pages for src in sources) > LOCAL_PAGES:
            session = spark() if callable(spark) else spark
        slots = DRIVER_SLOTS if session is None else session.sparkContext.defaultParallelism
        plans, ranges = plan_tables(tasks, sources, dests, slots, binary=same_major)
        job = CopyJob(src_connstr, dst_connstr, snap.snapshot_id, copy_id, tuple(plans))
        keys = [copied_key(s, p) for s, p in zip(sources, plans, strict=True)]
        prepare_destination(dst_connstr, tasks, dests, keys)
        prepared_at = time.monotonic()
        totals = estimates(tasks, sources)
        if on_totals is not None:
            on_totals(dict(totals))
        with TableProgress(
            "copy", totals, lambda: done_rows(dst_connstr, copy_id), enabled=progress
        ):
            if session is None:
                _run_on_driver(job, ranges, max_parallel, cancelled)
            else:
                _run_job(session, job, ranges, max_parallel, cancelled)
        copied_at = time.monotonic()
        rows = done_rows(dst_connstr, copy_id)
    finish_destination(dst_connstr, dests, copy_id)
    log.debug(
        "copy timings: prepare %.2fs, %d ranges %.2fs, finish %.2fs",
        prepared_at - started, len(ranges), copied_at - prepared_at,
        time.monotonic() - copied_at,
    )  # fmt: skip
    result = CopyResult(snapshot=snap.txid_snapshot, rows={t.dest_table: 0 for t in tasks})
    result.rows.update(rows)
    result.seconds = time.monotonic() - started
    for table, count in result.rows.items():
        log.info("copy %s: %d rows", table, count)
    return result


def _run_on_driver(
    job: CopyJob,
    ranges: list[BlockRange],
    max_parallel: int | None,
    cancelled: threading.Event | None,
) -> None:
    """The tasks of :func:`_run_job`, run by threads here; failed ones are run again the
    same way (finished ranges are skipped)."""
    groups = task_groups(ranges, DRIVER_SLOTS, max_parallel)
    log.debug("copy: %d ranges in %d groups on the driver", len(ranges), len(groups))
    for attempt in range(JOB_RETRIES + 1):
        with ThreadPoolExecutor(len(groups), thread_name_prefix="pgferry-copy-task") as pool:
            outcomes = [pool.submit(copy_group, job, group) for group in groups]
        errors = [f.exception() for f in outcomes if f.exception() is not None]
        if not errors:
            return
        if cancelled is not None and cancelled.is_set():
            raise PgferryError("copy cancelled")
        first = errors[0]
        message = str(first) if isinstance(first, PgferryError) else repr(first)
        if attempt == JOB_RETRIES:
            raise DatabaseError(f"copy failed: {message}") from None
        log.warning("copy tasks failed (%s); retrying unfinished ranges", message)


def _run_job(
    spark,
    job: CopyJob,
    ranges: list[BlockRange],
    max_parallel: int | None,
    cancelled: threading.Event | None,
) -> None:
    """Run the Spark job; when it fails, run it again: finished ranges are skipped."""
    sc = spark.sparkContext
    groups = task_groups(ranges, sc.defaultParallelism, max_parallel)
    for attempt in range(JOB_RETRIES + 1):
        try:
            sc.setJobDescription("pgferry copy")
            # The lambda is pickled by value, copy_group by reference (the workers import it).
            sc.parallelize(groups, len(groups)).map(lambda g: copy_group(job, g)).collect()
            return
        except PgferryError:
            raise
        except Exception as exc:
            if cancelled is not None and cancelled.is_set():
                raise PgferryError("copy cancelled") from None
            message = job_error(exc)
            if attempt == JOB_RETRIES:
                raise DatabaseError(f"copy failed: {message}") from None
            log.warning("copy job failed (%s); retrying unfinished ranges", message)
