"""Both sides of a large lake table as Spark DataFrames, for compare and repair.

The load's tasks (:func:`~.lake_copy.run_groups`) write the source's rows in the sync
point's exported snapshot, with the table's row filters, as Parquet files into a scratch
folder under the lake; Spark reads them, and the Parquet files of the lake version of the
tick (:mod:`pgferry.lake.snapshots`) less the rows its position delete files name (an
Iceberg table written merge-on-read), cast to the source's types.  No row passes through
the driver.  The scratch folder is removed when the ``with`` ends, so whatever the caller
needs of the rows is computed (or collected) inside it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pgferry.db import connect
from pgferry.errors import TableError
from pgferry.lake import spec as lake_spec
from pgferry.lake import types as lake_types
from pgferry.pipeline.spark_connect import is_connect_session
from pgferry.pipeline.tables import resolve_table


@dataclass(frozen=True)
class LakeCompareTask:
    """One lake table to compare or repair with its source."""

    source_table: str  # schema.table on the provider, as the registry writes it
    src_schema: str
    src_name: str
    dest_table: str  # the leaf's shape table (its columns are the lake's), in %I.%I form
    spec: lake_spec.LakeSpec
    columns: tuple[lake_types.LakeColumn, ...]
    condition: str | None = None  # on the source only
    key: tuple[str, ...] = ()  # the table's key (repair: empty for a keyless table)


@contextmanager
def sides(
    spark, src_connstr: str, snapshot: str, tick: int, task: LakeCompareTask
) -> Iterator[tuple[Any, Any]]:
    """(the source's rows, the lake version's rows): DataFrames of the task's columns, in
    that order and of the same types."""
    from pyspark.sql import functions as F

    from pgferry.lake import snapshots
    from pgferry.pipeline.copy.plan import block_ranges, task_groups
    from pgferry.pipeline.copy.task import BlockRange
    from pgferry.pipeline.lake_copy import LakeJob, LakePlan, run_groups

    if task.spec.remote:  # Spark here has no jars for s3a:// (none come from Maven)
        raise TableError(
            f"{task.source_table}: a lake table this large on object storage is compared"
            " and repaired only on the driver: its Spark path reads a local lake"
        )
    if is_connect_session(spark):
        raise TableError(
            f"{task.source_table}: a lake table this large is compared on a classic Spark"
            " session (local[*] or spark://), not a Spark Connect one (sc://)"
        )
    scratch = os.path.join(task.spec.root, f".pgferry-compare-{uuid.uuid4().hex}")
    where = lake_spec.LakeSpec("delta", scratch, "source", "rows", "")
    try:
        with connect(src_connstr, autocommit=True) as conn:
            src = resolve_table(conn, task.source_table)
        slots = spark.sparkContext.defaultParallelism
        pages = 0 if src.partitioned else src.pages
        ranges = [BlockRange(0, n, lo, hi, 1) for n, (lo, hi) in
                  enumerate(block_ranges(pages, slots))]  # fmt: skip
        plan = LakePlan(task.dest_table, task.src_schema, task.src_name, task.columns,
                        task.condition, not src.partitioned, where)  # fmt: skip
        job = LakeJob(src_connstr, snapshot, (plan,))
        run_groups(spark, job, task_groups(ranges, slots, None), None)
        names = [c.name for c in task.columns]
        source = spark.read.parquet(where.location).select(*names)
        files = snapshots.data_files(task.spec, tick)
        types = {f.name: f.dataType for f in source.schema.fields}
        if files:
            lake = _without_deleted(spark, spark.read.parquet(*files),
                                    snapshots.delete_files(task.spec, tick))  # fmt: skip
            lake = lake.select(*[F.col(n).cast(types[n]).alias(n) for n in names])
        else:  # an emptied table: Spark reads no list of no files
            lake = spark.createDataFrame([], source.schema)
        yield source, lake
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _without_deleted(spark, lake, deletes: list[str]):
    """The rows of ``lake`` (its data files read as Parquet) less those the position
    delete files ``deletes`` name.  A row is known by its file's name and its index in
    the file: file names are unique in a table (pyiceberg's and the load's carry a
    UUID), and a name needs none of the path's spelling (Spark's URI against Iceberg's)."""
    from pyspark.sql import functions as F

    if not deletes:
        return lake
    name = r"([^/]+)$"
    rows = lake.select("*", F.regexp_extract(F.col("_metadata.file_path"), name, 1).alias(_FILE),
                       F.col("_metadata.row_index").alias(_POS))  # fmt: skip
    gone = spark.read.parquet(*deletes).select(
        F.regexp_extract(F.col("file_path"), name, 1).alias(_FILE), F.col("pos").alias(_POS)
    )
    return rows.join(gone, [_FILE, _POS], "left_anti").drop(_FILE, _POS)


_FILE = "__pgferry_file"
_POS = "__pgferry_pos"
