"""Compare: row count and an order-independent checksum per primary-key bucket, both sides.

:func:`compare_tables` runs on the driver: it prepares the tables (:mod:`.buckets`), runs the
Spark job and merges the per-bucket results.  The executors run ``_sum_group``, one task per
side and bucket group: it receives the job (connection strings, snapshot ids, each table's
plan) and a :class:`~.buckets.BucketGroup`, which Spark pickles, so both hold plain values.

The databases do the work: each Spark task runs one aggregate per side over a contiguous group
of key buckets (``width_bucket`` over sampled key boundaries), returning per bucket the row
count and the sum of a 64-bit hash of every row (``hash_record_extended`` when both sides
have the same hashable column types, else ``hashtextextended`` of the row's text).
PostgreSQL sums bigints into numeric and the driver adds Python ints, so nothing overflows
(Spark's ANSI mode would raise on a plain 64-bit sum).  Buckets are small, so the differing
ones tell repair exactly where to look.

Both sides are read at one logical point each: snapshots given by the caller (exported at a
tick by the replication worker) or exported here for the duration of the job.

Where the sums run (see docs/replication.md, "When Spark runs"): on the default
configuration (Spark in local mode, :func:`driver_threads` > 0) always in threads of the
command, as a local Spark job would run the same queries from the same cores after a JVM
start of many seconds; with a cluster (``spark_master = spark://...`` or ``spark_remote =
sc://...``) tables over :data:`LOCAL_PAGES` as Spark tasks on its executors.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgferry import settings
from pgferry.db import describe, error_text
from pgferry.errors import DatabaseError, PgferryError
from pgferry.pipeline.keyranges import KeyRange, merge_buckets
from pgferry.pipeline.snapshot import maybe_snapshot, open_in_snapshot
from pgferry.pipeline.spark_errors import job_error
from pgferry.sync.buckets import (
    SESSION_SQL,
    BucketGroup,
    CompareTask,
    Prepared,
    Side,
    TablePlan,
    bucket_groups,
    prepare,
)

if TYPE_CHECKING:  # PySpark: loaded where a job runs
    from pyspark.sql import SparkSession

    from pgferry.sync.spark_tasks import Spark

log = logging.getLogger(__name__)

# Buckets summed by one task (~1M rows).  Each side of each group is its own task, so even
# one table keeps two cores busy; smaller groups would turn one sequential scan into several
# index range scans, which measured slower.
GROUP_BUCKETS = 2000
# Tables of at most this many 8 kB pages on both sides (~8 MB, some 100,000 narrow rows) are
# summed on the driver with the same queries: a Spark job's start (seconds, a JVM of a few
# hundred MB) would cost more than the whole comparison.
LOCAL_PAGES = 1000


@dataclass
class TableComparison:
    source_table: str
    dest_table: str
    pkey: tuple[str, ...]
    src_rows: int = 0
    src_checksum: int = 0
    dst_rows: int = 0
    dst_checksum: int = 0
    ranges: list[KeyRange] = field(default_factory=list)  # differing key ranges

    @property
    def matches(self) -> bool:
        return not self.ranges and (self.src_rows, self.src_checksum) == (
            self.dst_rows,
            self.dst_checksum,
        )

    def lines(self) -> list[str]:
        """Report in the original's words."""
        out = [
            f"srcdb: {self.src_rows} rows, checksum={self.src_checksum}",
            f"dstdb: {self.dst_rows} rows, checksum={self.dst_checksum}",
        ]
        if self.matches:
            out.append(f"{self.dest_table}: ok")
        else:
            out.append(f"{self.dest_table}: Results do not match!")
            for rng in self.ranges:
                out.append(f"  differs: {rng.describe(self.pkey)}")
        return out


@dataclass(frozen=True)
class _Job:
    src_connstr: str
    dst_connstr: str
    src_snapshot: str
    dst_snapshot: str
    plans: tuple[TablePlan, ...]
    count_only: bool = False  # rows counted, not hashed (checksums all 0)


# A unit of compare's work: (side, 0 source or 1 destination, a group of buckets); and its
# sums: (table_no, side, per bucket (rows, checksum)).
_Unit = tuple[int, BucketGroup]
_Sums = tuple[int, int, dict[int, tuple[int, int]]]


def compare_tables(
    spark: Spark,
    src_connstr: str,
    dst_connstr: str,
    tasks: list[CompareTask],
    *,
    src_snapshot: str | None = None,
    dst_snapshot: str | None = None,
    threads: int = 0,
    count_only: bool = False,
) -> list[TableComparison]:
    """Compare each task's tables; the result lists per table totals and differing ranges.
    ``count_only``: only the rows per bucket are counted (checksums stay 0).

    ``threads`` is :func:`driver_threads`: more than 0 on the default configuration (local
    mode), where every table is summed on the driver by that many threads; 0 with a cluster
    master or Spark Connect, where only small tables (``LOCAL_PAGES``) are, one group after
    the other, and larger ones by a Spark job on the cluster.
    """
    if not tasks:
        raise PgferryError("compare: no tables given")
    with (
        maybe_snapshot(src_connstr, src_snapshot) as src_snap,
        maybe_snapshot(dst_connstr, dst_snapshot) as dst_snap,
    ):
        prepared = prepare(src_connstr, dst_connstr, tasks, src_snap)
        job = _Job(src_connstr, dst_connstr, src_snap, dst_snap, tuple(prepared.plans), count_only)
        groups = bucket_groups(prepared.boundaries, GROUP_BUCKETS)
        units = [(side, g) for g in groups for side in (0, 1)]
        if threads or _small(prepared):
            # The same per-bucket sums, run here: the servers do the work, and a local Spark
            # job would run these queries from these cores after starting a JVM.
            log.debug("compare: %d bucket groups summed on the driver", len(groups))
            results = _on_driver(job, units, threads)
        else:
            results = _on_spark(spark() if callable(spark) else spark, job, units)
    out = []
    for table_no, task in enumerate(tasks):
        comparison = TableComparison(
            task.source_table, task.dest_table, prepared.plans[table_no].key.names
        )
        src_b: dict[int, tuple[int, int]] = {}
        dst_b: dict[int, tuple[int, int]] = {}
        for no, side, part in results:
            if no == table_no:
                (dst_b if side else src_b).update(part)
        comparison.src_rows = sum(c for c, _ in src_b.values())
        comparison.src_checksum = sum(s for _, s in src_b.values())
        comparison.dst_rows = sum(c for c, _ in dst_b.values())
        comparison.dst_checksum = sum(s for _, s in dst_b.values())
        differing = [b for b in set(src_b) | set(dst_b) if src_b.get(b) != dst_b.get(b)]
        comparison.ranges = merge_buckets(prepared.boundaries[table_no], differing)
        out.append(comparison)
    return out


def driver_threads(values: Mapping[str, str]) -> int:
    """Threads that run compare's sums (and mark repair's reads) on the driver in place of
    Spark: in local mode (the default) as many as Spark would use; with a cluster master
    (``spark://``, ...) or Spark Connect 0: Spark runs what is too large for the driver."""
    if settings.from_values(values, settings.SPARK_REMOTE):
        return 0
    master = settings.from_values(values, settings.SPARK_MASTER)
    found = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if found is None:
        return 0
    if found[1] is None:
        return 1
    return (os.cpu_count() or 1) if found[1] == "*" else int(found[1])


def _on_driver(job: _Job, units: list[_Unit], threads: int) -> list[_Sums]:
    """``_sum_group`` of every unit here, in ``threads`` threads (the databases do the work)."""

    def run(unit: _Unit) -> _Sums:
        side, group = unit
        return group.table_no, side, _sum_group(job, group, side)

    if threads <= 1 or len(units) <= 1:
        return [run(u) for u in units]
    with ThreadPoolExecutor(min(threads, len(units)), thread_name_prefix="compare") as pool:
        return list(pool.map(run, units))


def _small(prepared: Prepared) -> bool:
    """Whether every table pair is small enough to be summed without Spark."""
    return all(
        max(src.pages, dst.pages) <= LOCAL_PAGES
        for src, dst in zip(prepared.sources, prepared.dests, strict=True)
    )


def _on_spark(session: SparkSession, job: _Job, units: list[_Unit]) -> list[_Sums]:
    """One Spark task per side and bucket group (runs ``_sum_group`` on the executors)."""
    from pgferry.sync.spark_tasks import describe_job, run_each

    try:
        describe_job(session, "pgferry compare")
        return run_each(
            session, units, lambda u: (u[1].table_no, u[0], _sum_group(job, u[1], u[0]))
        )
    except PgferryError:
        raise
    except Exception as exc:
        raise DatabaseError(f"compare failed: {job_error(exc)}") from None


def _sum_group(job: _Job, group: BucketGroup, side: int) -> dict[int, tuple[int, int]]:
    """The Spark task's body (runs on an executor): one side of one bucket group."""
    plan = job.plans[group.table_no]
    if side == 0:
        return _sum_side(job.src_connstr, job.src_snapshot, plan, plan.src, group, job.count_only)
    return _sum_side(job.dst_connstr, job.dst_snapshot, plan, plan.dst, group, job.count_only)


def _sum_side(
    connstr: str,
    snapshot: str,
    plan: TablePlan,
    side: Side,
    group: BucketGroup,
    count_only: bool = False,
) -> dict[int, tuple[int, int]]:
    """Per global bucket: (rows, checksum) of one side (runs on an executor)."""
    where = [plan.key.predicate(KeyRange(group.lower, group.upper))]
    if side.condition:
        from pgferry import expressions  # pglast: only for a condition

        where.append(expressions.as_sql(side.condition))
    row = sql.SQL("row({})").format(sql.SQL(", ").join(map(sql.Identifier, plan.columns)))
    row_hash: sql.Composable
    if count_only:
        row_hash = sql.SQL("0")
    elif plan.by_type:
        row_hash = sql.SQL("hash_record_extended({}, 0)").format(row)
    else:
        row_hash = sql.SQL("hashtextextended({}::text, 0)").format(row)
    query = sql.SQL(
        "select {bucket}, count(*), coalesce(sum({row_hash}), 0)::text"
        " from {table} where {where} group by 1"
    ).format(
        bucket=plan.key.bucket(group.thresholds),
        row_hash=row_hash,
        table=side.relation,
        where=sql.SQL(" and ").join(where),
    )
    conn = open_in_snapshot(connstr, snapshot)
    try:
        conn.execute(SESSION_SQL)
        rows = conn.execute(query).fetchall()
    except psycopg.Error as exc:
        raise DatabaseError(f"{describe(connstr)}: {error_text(exc)}") from None
    finally:
        conn.close()
    return {group.first_bucket + int(b): (int(c), int(s)) for b, c, s in rows}
