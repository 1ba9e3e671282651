"""Compare a lake table with its source at one tick.

The source is read in the sync point's exported snapshot, with the table's row filters
(copy condition, handler filter, capture ``when=``), column by column as the lake stores
it (:mod:`pgferry.lake.types`: the same casts as the load and replay).  The lake table is
read at the newest commit of a tick at most the sync point's (Delta: the version whose
commit carries that tick; Iceberg: the snapshot).  Both sides become Arrow tables of one
schema, then multisets of rows: the counts, an order-independent checksum (the sum of a
stable hash per row, as compare's) and the rows only one side has are reported.

Everything runs on the driver, which holds both sides of one table at a time: a table
over :data:`DRIVER_ROWS` rows is compared the same way, with a warning (a Spark job
reading the lake's Parquet files is not written yet).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from psycopg import sql

from pgferry import expressions
from pgferry.lake import formats
from pgferry.lake import spec as lake_spec
from pgferry.lake import types as lake_types
from pgferry.pipeline.snapshot import open_in_snapshot
from pgferry.pipeline.tables import relation

log = logging.getLogger(__name__)

DRIVER_ROWS = 2_000_000  # more rows than this are compared with a warning
SAMPLE = 5  # differing rows named in the log per side


@dataclass(frozen=True)
class LakeCompareTask:
    source_table: str  # schema.table on the provider, as the registry writes it
    src_schema: str
    src_name: str
    dest_table: str  # the leaf's shape table (its columns are the lake's)
    spec: lake_spec.LakeSpec
    columns: tuple[lake_types.LakeColumn, ...]
    condition: str | None = None  # on the source only


@dataclass
class LakeComparison:
    source_table: str
    dest_table: str
    src_rows: int = 0
    src_checksum: int = 0
    dst_rows: int = 0
    dst_checksum: int = 0
    only_src: list[tuple] = field(default_factory=list)  # rows only the source has (a sample)
    only_dst: list[tuple] = field(default_factory=list)
    ranges: list = field(default_factory=list)  # as compare's result: not cut into ranges

    @property
    def same(self) -> bool:
        return not self.only_src and not self.only_dst


def compare_lake(
    src_connstr: str, src_snapshot: str, tick: int, tasks: Sequence[LakeCompareTask]
) -> list[LakeComparison]:
    return [_compare(src_connstr, src_snapshot, tick, task) for task in tasks]


def _compare(src_connstr: str, snapshot: str, tick: int, task: LakeCompareTask):
    schema = lake_types.arrow_schema(task.columns)
    src = _read_source(src_connstr, snapshot, task, schema)
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


def _read_source(connstr: str, snapshot: str, task: LakeCompareTask, schema):
    conn = open_in_snapshot(connstr, snapshot)
    try:
        kind = conn.execute(
            "select relkind::text from pg_class where oid = to_regclass(%s)",
            (task.source_table,),
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


def _multiset(table) -> Counter:
    return Counter(
        tuple(tuple(v) if isinstance(v, list) else v for v in row.values())
        for row in table.to_pylist()
    )


def _checksum(rows: Counter) -> int:
    total = 0
    for row, n in rows.items():
        digest = hashlib.blake2b(repr(row).encode(), digest_size=8).digest()
        total += n * int.from_bytes(digest, "big", signed=True)
    return total % (1 << 63)
