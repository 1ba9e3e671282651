"""``compare`` and ``repair`` of a node's tables against its provider, at one tick.

What the two commands decide and run, between the command line (which parses, calls
:func:`compare_node` or :func:`repair_node` and prints what they return) and the jobs:
the tables (:mod:`.tasks`), the sync point both sides are read at (:mod:`.point`), lake
tables apart from PostgreSQL ones (:mod:`.lake_compare`, :mod:`.lake_repair`), and whether
Spark starts at all: on the default configuration (local mode, ``driver_threads``) compare
runs on the driver's threads, and repair reads a table too large for the driver only in
compare's differing ranges; on a cluster a large table's Spark session starts before the
sync point, which holds the worker, rather than inside it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgferry.config import Config
from pgferry.db import connection, replica_dsn
from pgferry.errors import TableError
from pgferry.node.connect import local_connstr
from pgferry.pipeline.tables import resolve_table
from pgferry.sync import compare, repair_local
from pgferry.sync import tasks as sync_tasks
from pgferry.sync.buckets import CompareTask
from pgferry.sync.compare import TableComparison, compare_tables, driver_threads
from pgferry.sync.lake_compare import LakeComparison, compare_lake
from pgferry.sync.lake_repair import LakeRepair, repair_lake
from pgferry.sync.point import sync_point
from pgferry.sync.repair import RepairResult, repair_tables

log = logging.getLogger(__name__)

Spark = Callable[[], Any]  # returns the session; called only for work that needs it


@dataclass
class Compared:
    """What ``compare`` found: each table's totals, and a line for each table either node
    lost (not compared)."""

    tick_id: int
    results: list[TableComparison | LakeComparison] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


@dataclass
class Repaired:
    """What ``repair`` found (and with ``apply`` fixed): each keyed or lake table's
    counts; the tables without a key, which are only compared, as those that match and
    those that differ (to be resynced)."""

    results: list[RepairResult | LakeRepair] = field(default_factory=list)
    keyless_matching: list[str] = field(default_factory=list)
    unrepaired: list[str] = field(default_factory=list)


def session(config: Config, verbose: int) -> Any:
    """The command's own session: on a cluster it gets an executor within ``spark_wait``
    seconds or fails with one line naming the master (SparkUnavailable)."""
    from pgferry.pipeline.spark import SparkOptions, spark_for  # PySpark: only when needed

    app = f"pgferry-{config.job_name}-sync"
    options = SparkOptions.from_values(config.values, app, verbose > 1, remote_ok=True)
    return spark_for(options)


def compare_node(
    config: Config, names: list[str], *, count_only: bool = False, verbose: int = 0
) -> Compared:
    """The tables ``names`` (all when empty) compared with the provider at one tick."""
    tasks, lakes = sync_tasks.split_lakes(config, sync_tasks.node_tasks(config, names))

    def spark() -> Any:  # started only on a cluster or for a large lake table, if at all
        return session(config, verbose)

    with sync_point(config) as point:
        log.info("Comparing at tick %s", point.tick_id)
        tasks, missing = sync_tasks.present(config, point, tasks)
        lakes, missing_lakes = sync_tasks.present(config, point, lakes)
        # Tables kept in a lake; Spark only for large ones.
        results: list[TableComparison | LakeComparison] = []
        if lakes:
            results += compare_lake(
                point.provider_dsn, point.src_snapshot, point.tick_id, lakes, spark
            )
        if tasks:
            results += compare_tables(
                spark,
                point.provider_dsn,
                point.local_dsn,
                tasks,
                src_snapshot=point.src_snapshot,
                dst_snapshot=point.dst_snapshot,
                threads=driver_threads(config.values),  # local mode: no Spark at all
                count_only=count_only,
            )
    return Compared(point.tick_id, results, missing + missing_lakes)


def repair_node(
    config: Config,
    names: list[str],
    *,
    apply: bool = False,
    fix_dir: Path = Path("."),
    where: str | None = None,
    verbose: int = 0,
) -> Repaired:
    """The rows of the tables ``names`` (all when empty) that differ from the provider at
    one tick, written as fix files under ``fix_dir`` and with ``apply`` applied (a lake
    table's fix: one lake commit each); ``where`` narrows both sides."""
    tasks, lakes = sync_tasks.split_lakes(config, sync_tasks.node_tasks(config, names))
    if lakes and where:
        raise TableError(f"repair: --repair-where is not taken for a lake table "
                         f"({lakes[0].dest_table})")  # fmt: skip
    if where:
        tasks = sync_tasks.narrowed(config, tasks, where)
    # A table without a key cannot be repaired row by row: compared only, so that the
    # others are still repaired and the run names what needs a resync.
    keyless = [t for t in tasks if not t.key]
    tasks = [t for t in tasks if t.key]
    threads = driver_threads(config.values)
    large = bool(tasks) and _large(config, tasks, threads)
    # On a cluster a large table surely needs Spark: started before the sync point, which
    # holds the worker. In local mode compare's sums (no Spark) narrow it first.
    started = session(config, verbose) if large and not threads else None

    def spark() -> Any:  # started only when a table needs it
        return started or session(config, verbose)

    # With --apply the worker holds at the tick until the fix is in (see point.py).
    with sync_point(config, pause=apply) as point:
        # A lake table's fix: one lake commit each, written at the tick.
        results: list[RepairResult | LakeRepair] = []
        if lakes:
            results += repair_lake(
                point.provider_dsn, point.src_snapshot, point.tick_id, lakes, apply, spark
            )
        narrow = keyless + (tasks if large and threads else [])
        compared: dict[str, TableComparison] = {}
        if narrow:
            found = compare_tables(
                spark, point.provider_dsn, point.local_dsn, narrow,
                src_snapshot=point.src_snapshot, dst_snapshot=point.dst_snapshot,
                threads=threads,
            )  # fmt: skip
            compared = {c.dest_table: c for c in found}
        # Only compare's differing ranges are read (none when the table matches); a table
        # that differs without a range to show for it is read whole.
        ranges = {
            t.dest_table: c.ranges
            for t in tasks
            if (c := compared.get(t.dest_table)) is not None and (c.ranges or c.matches)
        }
        if tasks:
            results += repair_tables(
                spark,
                point.provider_dsn,
                replica_dsn(point.local_dsn),
                tasks,
                fix_dir=fix_dir,
                apply=apply,
                src_snapshot=point.src_snapshot,
                dst_snapshot=point.dst_snapshot,
                ranges=ranges or None,
                threads=threads,
            )
    unrepaired = [t.dest_table for t in keyless if not compared[t.dest_table].matches]
    matching = [t.dest_table for t in keyless if t.dest_table not in unrepaired]
    return Repaired(results, matching, unrepaired)


def _large(config: Config, tasks: list[CompareTask], threads: int) -> bool:
    """Whether reading the local tables whole is over the driver's limit. On a cluster
    repair then surely needs Spark, which starts before the sync point (which holds the
    worker) rather than inside it; in local mode (``threads``, where the limit is the rows
    read whole, else the pages) compare's sums narrow the read to the differing ranges."""
    with connection(local_connstr(config)) as conn:
        tables = [resolve_table(conn, t.dest_table) for t in tasks]
    large = max(t.pages for t in tables) > compare.LOCAL_PAGES
    if threads:  # as repair_local.small_read decides for a read of whole tables
        return large and sum(max(t.est_rows, 0) for t in tables) > repair_local.LOCAL_MODE_ROWS
    return large
