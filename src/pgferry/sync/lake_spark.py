"""Both sides of a large lake table as Spark DataFrames, for compare and repair.

The load's tasks (:func:`pgferry.pipeline.lake_copy.run_groups`) write the source's rows in
the sync point's exported snapshot, with the table's row filters, as Parquet files into a
scratch folder under the lake; Spark reads them, and the Parquet files of the lake version
of the tick (:mod:`pgferry.lake.snapshots`) less the rows its position delete files name
(an Iceberg table written merge-on-read), cast to the source's types.  No row passes through
the driver.  The scratch folder is removed when the ``with`` ends, so whatever the caller
needs of the rows is computed (or collected) inside it.

A lake on an object store keeps its scratch folder under the lake's prefix too; Spark's
own Parquet reader reaches no store without the ``hadoop-aws`` jars, so both sides are
read by Python tasks through pyarrow's S3 file system (:func:`store_frame`, one task per
file, the store's options in the task's closure), an Iceberg file's columns by field id.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgferry.db import connect
from pgferry.errors import TableError
from pgferry.lake import spec as lake_spec
from pgferry.lake import storage
from pgferry.lake import types as lake_types
from pgferry.pipeline.spark_connect import is_connect_session
from pgferry.pipeline.tables import resolve_table

if TYPE_CHECKING:  # PySpark and Arrow: loaded where a job runs
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


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
    spark: SparkSession, src_connstr: str, snapshot: str, tick: int, task: LakeCompareTask
) -> Iterator[tuple[DataFrame, DataFrame]]:
    """(the source's rows, the lake version's rows): DataFrames of the task's columns, in
    that order and of the same types."""
    from pyspark.sql import functions as F

    from pgferry.lake import snapshots
    from pgferry.pipeline.copy.plan import block_ranges, task_groups
    from pgferry.pipeline.copy.task import BlockRange
    from pgferry.pipeline.lake_copy import LakeJob, LakePlan, run_groups

    if is_connect_session(spark):
        raise TableError(
            f"{task.source_table}: a lake table this large is compared on a classic Spark"
            " session (local[*] or spark://), not a Spark Connect one (sc://)"
        )
    remote = task.spec.remote
    scratch = storage.join(task.spec.root, f".pgferry-compare-{uuid.uuid4().hex}")
    where = lake_spec.LakeSpec("delta", scratch, "source", "rows", "", task.spec.storage)
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
        written = run_groups(spark, job, task_groups(ranges, slots, None), None)
        names = [c.name for c in task.columns]
        if remote:
            # Spark's Parquet reader reaches no store without jars: Python tasks read the
            # files through pyarrow's S3 file system, as the load's tasks wrote them.
            arrow = lake_types.arrow_schema(task.columns)
            paths = [storage.join(where.location, entry[1]) for entry in written]
            source = store_frame(spark, paths, task.spec.storage, arrow, arrow)
            files = snapshots.data_files(task.spec, tick)
            lake = store_frame(spark, files, task.spec.storage,
                               snapshots.table_schema(task.spec), arrow,
                               snapshots.delete_files(task.spec, tick))  # fmt: skip
            yield source, lake
            return
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
        _remove(scratch, task.spec.storage)


def store_frame(
    spark: SparkSession, files: list[str], opts: storage.Options, table_schema: pa.Schema,
    arrow: pa.Schema, deletes: list[str] | None = None,
) -> DataFrame:  # fmt: skip
    """A DataFrame of the Parquet ``files`` of a store, read by one Python task per file
    (:func:`pgferry.lake.snapshots.read_file`) as ``arrow``'s columns and types, less the
    rows the position delete files ``deletes`` name (Iceberg merge-on-read: each names a
    data file by its URL, as ``files`` does).  The store's options travel in the task's
    closure, never in a conf or a log line."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    # Every column nullable, as Spark reads Parquet: the two sides' types then agree.
    schema = from_arrow_schema(_nullable(arrow))
    if not files:
        return spark.createDataFrame([], schema)
    columns = list(arrow.names)
    # Spark's TimestampType wants a zone in Arrow: the values are instants, kept as UTC.
    wanted = to_arrow_schema(schema, timezone="UTC")

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pgferry.lake import snapshots

        for batch in batches:
            for number in batch.column(0).to_pylist():
                yield from snapshots.read_file(files[number], opts, table_schema,
                                               columns, wanted, name=files[number],
                                               deletes=deletes or ())  # fmt: skip

    return spark.range(len(files), numPartitions=len(files)).mapInArrow(read, schema)


def _nullable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field nullable."""
    import pyarrow as pa

    return pa.schema([f.with_nullable(True) for f in schema])


def _remove(scratch: str, opts: storage.Options) -> None:
    """The scratch folder (or the store's prefix) and its files, whatever is left of it."""
    if not storage.is_remote(scratch):
        shutil.rmtree(scratch, ignore_errors=True)
        return
    store, inner = storage.filesystem(scratch, opts)
    with suppress(OSError):  # the store gone away: the prefix stays, named by its uuid
        store.delete_dir(inner)


def _without_deleted(spark: SparkSession, lake: DataFrame, deletes: list[str]) -> DataFrame:
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
