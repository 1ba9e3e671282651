"""``pgferry diff``: any two tables compared, their differing keys found, the fix made.

No node and no sync point: each side is read as it stands.  :func:`find` checks both tables
(and a ``--where``) before Spark could start, so that bad input fails fast with one line,
compares them (:mod:`.compare`) and refines the differing ranges to keys (:mod:`.keydiff`,
with repair's reads); :func:`fix` writes (and applies) the fix from the rows found, read
once.  The command line prints between the two, so that the report stands before the fix
is tried.

Spark starts only for work that needs it: on the default configuration (local mode) only
for a read of compare's ranges too large for the driver; with a cluster for tables too
large for the driver (docs/replication.md, "When Spark runs").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgferry.db import connect, describe
from pgferry.pipeline.tables import require_same_columns, resolve_table
from pgferry.sync.buckets import CompareTask
from pgferry.sync.compare import TableComparison, compare_tables, driver_threads

if TYPE_CHECKING:  # imported where a difference is found: nothing more to load otherwise
    from pgferry.sync.keydiff import KeyReport
    from pgferry.sync.repair import RepairResult


@dataclass
class Found:
    """Both tables' totals (``result``) and, when they differ, the differing keys
    (``report``) and the rows they were made of (``rows``, what :func:`fix` writes from)."""

    task: CompareTask
    result: TableComparison
    report: KeyReport | None
    rows: tuple[Any, ...] | None
    spark: Any  # () -> SparkSession, started only for work that needs it
    threads: int

    @property
    def matches(self) -> bool:
        return self.result.matches


def find(
    src_connstr: str,
    src_table: str,
    dst_connstr: str,
    dst_table: str,
    *,
    where: str | None = None,
    max_rows: int = 10,
    overrides: Mapping[str, str] | None = None,
    verbose: int = 0,
) -> Found:
    """The two tables compared (``where`` on both sides) and, when they differ, their
    differing keys with the rows of the first ``max_rows``."""
    values = dict(overrides or {})
    if where:
        from pgferry import expressions  # pglast: only for a --where

        where = expressions.boolean_expression(where, "--where")
    else:
        where = None
    with connect(src_connstr, autocommit=True) as conn:
        src = resolve_table(conn, src_table, describe(src_connstr))
        if where:
            expressions.check_on_table(conn, src.schema, src.name, where, "--where")
    with connect(dst_connstr, autocommit=True) as conn:
        dst = resolve_table(conn, dst_table, describe(dst_connstr))
        if where:
            expressions.check_on_table(conn, dst.schema, dst.name, where, "--where")
    require_same_columns(src, dst)

    def spark() -> Any:
        from pgferry.pipeline.spark import SparkOptions, spark_for

        options = SparkOptions.from_values(values, "pgferry-diff", verbose > 1, remote_ok=True)
        return spark_for(options)

    task = CompareTask(src.display, dst.display, where, where)
    threads = driver_threads(values)  # local mode: the driver's threads instead of Spark
    (result,) = compare_tables(spark, src_connstr, dst_connstr, [task], threads=threads)
    if result.matches:
        return Found(task, result, None, None, spark, threads)
    # The differing ranges refined to keys.
    from pgferry.sync.keydiff import key_report
    from pgferry.sync.repair import find_differences

    rows = find_differences(
        spark, src_connstr, dst_connstr, [task],
        ranges={task.dest_table: result.ranges}, threads=threads,
    )  # fmt: skip
    return Found(task, result, key_report(task, rows, max_rows), rows, spark, threads)


def fix(
    found: Found, src_connstr: str, dst_connstr: str, fix_file: Path, *, apply: bool = False
) -> RepairResult:
    """The fix of ``found``'s differences written to ``fix_file`` (mode 0600) and with
    ``apply`` applied to the destination, from the rows the report was made of."""
    from pgferry.sync.repair import repair_tables

    (fixed,) = repair_tables(
        found.spark,
        src_connstr,
        dst_connstr,
        [found.task],
        fix_dir=fix_file.parent,
        fix_file=fix_file,
        apply=apply,
        ranges={found.task.dest_table: found.result.ranges},
        threads=found.threads,
        found=found.rows,  # the rows the report was made of: read once
    )
    return fixed
