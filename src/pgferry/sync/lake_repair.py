"""Repair a lake table against its source at one tick.

As :mod:`.lake_compare` reads them: the source in the sync point's exported snapshot with
the table's row filters, the lake table at its newest commit of a tick at most the sync
point's, both as the lake's types.  The rows that differ become ONE lake commit per table
on top of that version (:func:`pgferry.lake.delta.repair`, :func:`pgferry.lake.iceberg.repair`):

- a table with a key: rows whose key the lake lacks are inserted, rows whose key it holds
  with other values (or more than once) are written anew, keys the source lacks deleted;
- a keyless table is a multiset: each row the source holds more often is added, each row
  the lake holds more often removed once (the keyless replay's rewrite, in one commit).

The commit carries the sync tick and keeps the replay version the table recorded, so
replay's exactly-once bookkeeping does not see it.  A lake table whose newest commit is of
a later tick (a batch committed in the lake and not yet in PostgreSQL) is refused: the
fix would be computed against rows that are no longer the table's.

Tables of at most :data:`~.lake_compare.DRIVER_ROWS` rows (the source's estimate) are read
and diffed on the driver.  Larger ones on Spark, from the files compare's Spark path reads
(:mod:`.lake_spark`): joins on the key (keyless: ``exceptAll`` each way) find the rows to
fix, and only those come to the driver, which writes the same one commit.  A fix of more
than :data:`MAX_FIXES` rows is refused with ``--apply`` (resync loads such a table anew).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgferry.lake import formats
from pgferry.lake import spec as lake_spec
from pgferry.lake import types as lake_types
from pgferry.sync import lake_compare
from pgferry.sync.lake_compare import SAMPLE, read_source
from pgferry.sync.lake_spark import LakeCompareTask

if TYPE_CHECKING:  # PySpark and Arrow: loaded where a table needs them
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

MAX_FIXES = 1_000_000  # rows to fix that may pass through the driver, per table
HELD = "__pgferry_held"  # Spark: the lake's rows of a key (no table's column)


@dataclass
class LakeRepair:
    source_table: str
    dest_table: str
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    applied: bool = False
    sql_path: str | None = None  # as repair's result: a lake has no fix file


@dataclass
class _Fix:
    task: LakeCompareTask
    result: LakeRepair
    upserts: pa.Table  # the source's rows to write
    gone: pa.Table  # the lake's rows (keyed: whose keys are cleared) to remove


def repair_lake(
    src_connstr: str,
    snapshot: str,
    tick: int,
    tasks: Sequence[LakeCompareTask],
    apply: bool,
    spark: Callable[[], SparkSession] | None = None,  # called only for large tables
) -> list[LakeRepair]:
    """The differences of every table first, then (``apply``) one commit per table."""
    fixes = [_diff(src_connstr, snapshot, tick, task, apply, spark) for task in tasks]
    if apply:
        for fix in fixes:
            if fix.upserts.num_rows or fix.gone.num_rows:
                _write(fix, tick)
                fix.result.applied = True
    return [fix.result for fix in fixes]


def _diff(src_connstr: str, snapshot: str, tick: int, task: LakeCompareTask, apply: bool,
          spark: Callable[[], SparkSession] | None) -> _Fix:  # fmt: skip
    spec = task.spec
    module = formats.module(spec.format)
    newest = module.newest_tick(spec)
    if newest is not None and newest > tick:
        raise lake_spec.LakeError(
            f"repair: lake table {spec.name} has a commit of tick {newest}, after the sync"
            f" tick {tick}: let the worker catch up and run repair again"
        )
    names = [c.name for c in task.columns]
    missing = [k for k in task.key if k not in names]
    if missing:
        raise lake_spec.LakeError(
            f"repair: {task.dest_table}: key column {missing[0]} is not in the lake table"
        )
    if spark is not None and lake_compare.estimate(src_connstr, task) > lake_compare.DRIVER_ROWS:
        fix = _diff_on_spark(spark(), src_connstr, snapshot, tick, task, apply)
    else:
        fix = _diff_on_driver(src_connstr, snapshot, tick, task, apply)
    for what, rows in (("to write", fix.upserts), ("to remove", fix.gone)):
        for row in rows.slice(0, SAMPLE).to_pylist():
            log.info("%s: %s: %r", task.dest_table, what, row)
    return fix


def _bounded(task: LakeCompareTask, result: LakeRepair) -> None:
    """Refuse a fix too large to pass through the driver as one commit."""
    n = result.inserts + result.updates + result.deletes
    if n > MAX_FIXES:
        raise lake_spec.LakeError(
            f"repair: {task.dest_table}: {n:,} rows to fix, more than {MAX_FIXES:,}:"
            f" resync {task.source_table} loads the table anew"
        )


def _diff_on_driver(src_connstr: str, snapshot: str, tick: int, task: LakeCompareTask,
                    apply: bool) -> _Fix:  # fmt: skip
    names = [c.name for c in task.columns]
    schema = lake_types.arrow_schema(task.columns)
    src = read_source(src_connstr, snapshot, task, schema)
    lake = formats.module(task.spec.format).read(task.spec, tick).select(names).cast(schema)
    result = LakeRepair(task.source_table, task.dest_table)
    if task.key:
        upserts, gone = _keyed(src, lake, [names.index(k) for k in task.key], result)
    else:
        upserts, gone = _multiset(src, lake, result)
    if apply:
        _bounded(task, result)
    return _Fix(task, result, upserts, gone)


def _diff_on_spark(spark: SparkSession, src_connstr: str, snapshot: str, tick: int,
                   task: LakeCompareTask, apply: bool) -> _Fix:  # fmt: skip
    """The differing rows found by Spark on both sides' files (:func:`.lake_spark.sides`):
    their counts come to the driver, and the rows to write and the keys (keyless: the
    rows) to clear only with ``apply`` (else the first few, for the log)."""
    import pyarrow as pa

    from pgferry.sync import lake_spark

    schema = lake_types.arrow_schema(task.columns)
    names = [c.name for c in task.columns]
    result = LakeRepair(task.source_table, task.dest_table)
    with lake_spark.sides(spark, src_connstr, snapshot, tick, task) as (source, lake):
        if task.key:
            write, gone = _keyed_on_spark(source, lake, list(task.key), result)
        else:
            write, gone = source.exceptAll(lake).persist(), lake.exceptAll(source).persist()
            result.inserts, result.deletes = write.count(), gone.count()
        try:
            if apply:
                _bounded(task, result)  # before a row is collected
            wanted = [c for c in gone.columns if c != HELD]
            upserts, cleared = write.select(*names), gone.select(*wanted)
            if not apply:
                upserts, cleared = upserts.limit(SAMPLE), cleared.limit(SAMPLE)
            upserts = upserts.toArrow().cast(schema)
            cleared = cleared.toArrow().cast(pa.schema([schema.field(c) for c in wanted]))
        finally:
            write.unpersist()
            gone.unpersist()
    return _Fix(task, result, upserts, cleared)


def _keyed_on_spark(
    source: DataFrame, lake: DataFrame, key: list[str], result: LakeRepair
) -> tuple[DataFrame, DataFrame]:
    """(the source's rows to write, the lake's keys to delete), both persisted, with the
    lake's rows of their key in column :data:`HELD`; ``result`` gets their counts."""
    from pyspark.sql import functions as F

    held = lake.groupBy(*key).agg(F.count(F.lit(1)).alias(HELD))
    # A key is right when the lake holds it once, with the source's row.
    right = source.intersect(lake).select(*key)
    right = right.join(held.where(F.col(HELD) == 1), key, "left_semi")
    write = source.join(right, key, "left_anti").join(held, key, "left").persist()
    gone = held.join(source.select(*key), key, "left_anti").persist()
    for new, n in write.groupBy(F.col(HELD).isNull()).count().collect():
        if new:
            result.inserts = int(n)
        else:
            result.updates = int(n)
    result.deletes = int(gone.agg(F.sum(HELD)).collect()[0][0] or 0)
    return write, gone


def _take(table: pa.Table, positions: list[int]) -> pa.Table:
    import pyarrow as pa

    return table.take(pa.array(positions, pa.int64()))


def _frozen(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row.values())


def _keyed(
    src: pa.Table, lake: pa.Table, key: list[int], result: LakeRepair
) -> tuple[pa.Table, pa.Table]:
    """(the source's rows to write, the lake's rows whose keys are cleared)."""
    held: dict[tuple[Any, ...], list[tuple[Any, ...]]] = defaultdict(list)
    lake_keys: dict[tuple[Any, ...], int] = {}  # key -> the position of one of its lake rows
    for i, row in enumerate(map(_frozen, lake.to_pylist())):
        k = tuple(row[j] for j in key)
        held[k].append(row)
        lake_keys.setdefault(k, i)
    write: list[int] = []
    clear: list[int] = []
    seen: set[tuple[Any, ...]] = set()
    for i, row in enumerate(map(_frozen, src.to_pylist())):
        k = tuple(row[j] for j in key)
        seen.add(k)
        here = held.get(k)
        if here == [row]:
            continue
        write.append(i)
        if here is None:
            result.inserts += 1
        else:
            result.updates += 1
            clear.append(lake_keys[k])
    for k, i in lake_keys.items():
        if k not in seen:
            clear.append(i)
            result.deletes += len(held[k])
    return _take(src, write), _take(lake, clear)


def _multiset(src: pa.Table, lake: pa.Table, result: LakeRepair) -> tuple[pa.Table, pa.Table]:
    """(the rows to add, the rows to remove once each): the multisets' differences."""
    from collections import Counter

    want = Counter(map(_frozen, src.to_pylist()))
    have = Counter(map(_frozen, lake.to_pylist()))
    add, remove = want - have, have - want

    def pick(table: pa.Table, counts: Counter[tuple[Any, ...]]) -> list[int]:
        chosen = []
        for i, row in enumerate(map(_frozen, table.to_pylist())):
            if counts.get(row):
                counts[row] -= 1
                chosen.append(i)
        return chosen

    upserts, gone = _take(src, pick(src, add)), _take(lake, pick(lake, remove))
    result.inserts, result.deletes = upserts.num_rows, gone.num_rows
    return upserts, gone


def _write(fix: _Fix, tick: int) -> None:
    import pyarrow as pa

    spec, key = fix.task.spec, fix.task.key
    module = formats.module(spec.format)
    # Every lake column (those dropped on the source too), nullable: a D row is a key.
    whole = module.arrow_schema(spec)
    whole = pa.schema([f.with_nullable(True) for f in whole])
    version = module.applied_version(spec)

    def widened(rows: pa.Table) -> pa.Table:
        """``rows`` with every lake column, NULL in those the leaf's table lacks."""
        for field in whole:
            if field.name not in rows.schema.names:
                rows = rows.append_column(field, pa.nulls(rows.num_rows, type=field.type))
        return rows.select(whole.names).cast(whole)

    upserts, gone = widened(fix.upserts), widened(fix.gone)
    if not key:
        module.multiset(spec, upserts, gone, version, tick)
        log.info("%s: repaired at tick %d", spec.name, tick)
        return
    # Clearing a written row's key too makes every write a delete and an insert.
    cleared = pa.concat_tables([gone, upserts]).select(list(key))
    cleared = pa.Table.from_pylist(
        [dict(k) for k in {tuple(r.items()): None for r in cleared.to_pylist()}],
        schema=cleared.schema,
    )
    clears = widened(cleared)
    ops = pa.array(["D"] * clears.num_rows + ["I"] * upserts.num_rows)
    source = pa.concat_tables([clears, upserts]).add_column(0, lake_spec.OP, ops)
    module.repair(spec, source, key, version, tick)
    log.info("%s: repaired at tick %d", spec.name, tick)
