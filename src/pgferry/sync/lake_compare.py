"""Compare a lake table with its source at one tick.

The source is read in the sync point's exported snapshot, with the table's row filters
(copy condition, handler filter, capture ``when=``), column by column as the lake stores
it (:mod:`pgferry.lake.types`: the same casts as the load and replay).  The lake table is
read at the newest commit of a tick at most the sync point's (Delta: the version whose
commit carries that tick; Iceberg: the snapshot).  Both sides become Arrow tables of one
schema, then multisets of rows: the counts, an order-independent checksum (the sum of a
stable hash per row, as compare's) and the rows only one side has are reported.

Tables of at most :data:`DRIVER_ROWS` rows (the source's estimate) are compared on the
driver.  Larger ones, on Spark: the load's tasks write the source's rows in the snapshot
as Parquet files into a scratch folder under the lake, Spark reads them and the lake
version's own Parquet files (:mod:`.lake_spark`), and compares them with one
``exceptAll`` each way: no row passes through the driver.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg import sql

from pgferry import expressions
from pgferry.db import connect
from pgferry.lake import formats
from pgferry.lake import types as lake_types
from pgferry.pipeline.keyranges import KeyRange
from pgferry.pipeline.snapshot import open_in_snapshot
from pgferry.pipeline.tables import relation, resolve_table
from pgferry.sync import lake_spark
from pgferry.sync.lake_spark import LakeCompareTask

if TYPE_CHECKING:  # PySpark and Arrow: loaded where a table needs them
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

DRIVER_ROWS = 500_000  # larger tables (the source's estimate) are compared on Spark
SAMPLE = 5  # differing rows named in the log per side


@dataclass
class LakeComparison:
    source_table: str
    dest_table: str
    src_rows: int = 0
    src_checksum: int = 0
    dst_rows: int = 0
    dst_checksum: int = 0
    # rows only the source has (a sample)
    only_src: list[tuple[Any, ...]] = field(default_factory=list)
    only_dst: list[tuple[Any, ...]] = field(default_factory=list)
    # as compare's result: not cut into ranges
    ranges: list[KeyRange] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not self.only_src and not self.only_dst


def compare_lake(
    src_connstr: str,
    src_snapshot: str,
    tick: int,
    tasks: Sequence[LakeCompareTask],
    spark: Callable[[], SparkSession] | None = None,  # called only for large tables
) -> list[LakeComparison]:
    results = []
    for task in tasks:
        large = spark is not None and estimate(src_connstr, task) > DRIVER_ROWS
        if large:
            assert spark is not None
            results.append(_compare_on_spark(spark(), src_connstr, src_snapshot, tick, task))
        else:
            results.append(_compare(src_connstr, src_snapshot, tick, task))
    return results


def estimate(connstr: str, task: LakeCompareTask) -> int:
    """The source's row estimate (against :data:`DRIVER_ROWS`)."""
    with connect(connstr, autocommit=True) as conn:
        return resolve_table(conn, task.source_table).est_rows


def _compare_on_spark(
    spark: SparkSession, src_connstr: str, snapshot: str, tick: int, task: LakeCompareTask
) -> LakeComparison:
    """Both sides read by Spark (:func:`.lake_spark.sides`), compared there."""
    with lake_spark.sides(spark, src_connstr, snapshot, tick, task) as (source, lake):
        names = [c.name for c in task.columns]
        only_src, only_dst = source.exceptAll(lake), lake.exceptAll(source)
        result = LakeComparison(task.source_table, task.dest_table)
        result.src_rows, result.src_checksum = _spark_sums(source, names)
        result.dst_rows, result.dst_checksum = _spark_sums(lake, names)
        result.only_src = [tuple(r) for r in only_src.limit(SAMPLE).collect()]
        result.only_dst = [tuple(r) for r in only_dst.limit(SAMPLE).collect()]
        return result


def _spark_sums(df: DataFrame, names: list[str]) -> tuple[int, int]:
    """(rows, order-independent checksum) of a DataFrame: the sum of each row's hash's low
    32 bits (no overflow below 2**31 rows)."""
    from pyspark.sql import functions as F

    row = df.agg(
        F.count(F.lit(1)),
        F.sum(F.xxhash64(*[F.col(n) for n in names]).bitwiseAND(F.lit(0xFFFFFFFF))),
    ).collect()[0]
    return int(row[0]), int(row[1] or 0)


def _compare(src_connstr: str, snapshot: str, tick: int, task: LakeCompareTask) -> LakeComparison:
    schema = lake_types.arrow_schema(task.columns)
    src = read_source(src_connstr, snapshot, task, schema)
    module = formats.module(task.spec.format)
    lake = module.read(task.spec, tick).select([c.name for c in task.columns]).cast(schema)
    a, b = _multiset(src), _multiset(lake)
    result = LakeComparison(task.source_table, task.dest_table)
    result.src_rows, result.src_checksum = src.num_rows, _checksum(a)
    result.dst_rows, result.dst_checksum = lake.num_rows, _checksum(b)
    result.only_src = list((a - b).elements())[:SAMPLE]
    result.only_dst = list((b - a).elements())[:SAMPLE]
    for what, rows in (
        ("only in the source", result.only_src),
        ("only in the lake", result.only_dst),
    ):
        for row in rows:
            log.info("%s: %s: %r", task.dest_table, what, row)
    return result


def read_source(connstr: str, snapshot: str, task: LakeCompareTask, schema: pa.Schema) -> pa.Table:
    """The source's rows in the snapshot, with the task's condition, as Arrow (``schema``)."""
    conn = open_in_snapshot(connstr, snapshot)
    try:
        kind = conn.execute(
            "select relkind::text from pg_class where oid = to_regclass(%s)",
            (sql.Identifier(task.src_schema, task.src_name).as_string(conn),),
        ).fetchone()
        query = sql.SQL("select {} from {}").format(
            sql.SQL(", ").join(c.select() for c in task.columns),
            relation(task.src_schema, task.src_name, bool(kind and kind[0] == "p")),
        )
        if task.condition:
            query = sql.SQL("{} where {}").format(query, expressions.as_sql(task.condition))
        rows = conn.execute(query).fetchall()
    finally:
        conn.close()
    if len(rows) > DRIVER_ROWS:
        log.warning("%s: %d rows compared on the driver", task.source_table, len(rows))
    return lake_types.rows_to_arrow(task.columns, rows, schema)


def _multiset(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(
        tuple(tuple(v) if isinstance(v, list) else v for v in row.values())
        for row in table.to_pylist()
    )


def _checksum(rows: Counter[tuple[Any, ...]]) -> int:
    total = 0
    for row, n in rows.items():
        digest = hashlib.blake2b(repr(row).encode(), digest_size=8).digest()
        total += n * int.from_bytes(digest, "big", signed=True)
    return total % (1 << 63)
