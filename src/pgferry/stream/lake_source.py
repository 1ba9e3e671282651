"""A lake leaf's tables read by ``spark.read``: the ``pgferry-lake`` Python data source.

``pgferry.stream.lake_source.register(spark)`` once per session, then::

    spark.read.format("pgferry-lake").load("/lake/public/orders")     # newest version
    spark.read.format("pgferry-lake").option("tick", 4711).load(path)  # as of a tick
    spark.read.format("pgferry-lake").option("columns", "id,amount").load(path)

The path is a lake table pgferry writes (``DIR/<schema>/<table>``): a Delta table read
through delta-rs's log, an Iceberg table through pgferry's SQL catalog of that lake
(``DIR/pgferry_catalog.db``); no jar is needed.  ``tick`` picks the newest version whose
commit carries ``pgferry.tick`` at most that tick (as ``compare`` reads the lake).

On the driver the reader lists the version's Parquet files, dropping those whose column
statistics exclude the query's filters (Delta: the add actions' min/max, Iceberg: the
manifests'), and makes one input partition per file; the executors read their file with
pyarrow, with the filters applied, and hand Arrow batches to Spark.  Spark (4.3) tells a
Python data source no required columns: the ``columns`` option names the ones to read
(default: all).  Filters on integer, floating, boolean, string and date columns are
taken by the source (``spark.sql.python.filterPushdown.enabled``, which ``register``
turns on); the others Spark evaluates after the scan.  Both formats as pgferry writes
them keep a version's rows in plain Parquet files (no deletion vectors, no delete files):
a table with delete files is refused in one line.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
)

from pgferry.lake.spec import LakeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

NAME = "pgferry-lake"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
# Filters on these Arrow types are compared by pyarrow as Spark compares them.
_PUSHABLE_KINDS = ("int", "uint", "float", "double", "bool", "string", "large_string", "date32")
_OPS = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
    In: "in",
}


def register(spark: SparkSession) -> None:
    """Make ``format("pgferry-lake")`` known to ``spark`` and turn on the Python data
    sources' filter pushdown (off by default in Spark; a source that takes filters is
    refused without it).  The workers run the interpreter chosen as for the change feed
    (:func:`pgferry.stream.worker_python`)."""
    from pgferry.stream import register_source

    spark.conf.set(PUSHDOWN_CONF, "true")
    register_source(spark, LakeSource)


@dataclass(frozen=True)
class _Table:
    """Which lake table a path is and the files of its version of a tick."""

    path: str
    format: str  # delta or iceberg

    @classmethod
    def at(cls, path: str) -> _Table:
        path = os.path.abspath(path.removeprefix("file://"))
        if os.path.isdir(os.path.join(path, "_delta_log")):
            return cls(path, "delta")
        if os.path.isdir(os.path.join(path, "metadata")):
            return cls(path, "iceberg")
        raise LakeError(f"{NAME}: no Delta or Iceberg table at {path}")

    def _delta(self, tick: int | None):
        from deltalake import DeltaTable

        table = DeltaTable(self.path)
        if tick is not None:
            for entry in table.history():  # newest first
                at = entry.get("pgferry.tick")
                if at is None or int(at) <= tick:
                    if int(entry["version"]) != table.version():
                        table.load_as_version(int(entry["version"]))
                    break
            else:
                raise LakeError(f"{NAME}: {self.path} holds no version of tick {tick} or before")
        return table

    def _iceberg(self, tick: int | None):
        from pgferry.lake import iceberg

        root = os.path.dirname(os.path.dirname(self.path))
        ident = (os.path.basename(os.path.dirname(self.path)), os.path.basename(self.path))
        table = iceberg.catalog(root).load_table(ident)
        snapshot = table.current_snapshot()
        if tick is not None:
            snapshot = next(
                (s for s in iceberg._ancestry(table)
                 if s.summary is None or int(s.summary.additional_properties.get(
                     iceberg.TICK, tick)) <= tick),
                None,
            )  # fmt: skip
            if snapshot is None:
                raise LakeError(f"{NAME}: {self.path} holds no version of tick {tick} or before")
        return table, snapshot

    def arrow_schema(self, tick: int | None):
        import pyarrow as pa

        if self.format == "delta":
            return pa.schema(self._delta(tick).schema().to_arrow())
        table, snapshot = self._iceberg(tick)
        schema = table.schemas().get(snapshot.schema_id) if snapshot is not None else None
        return (schema or table.schema()).as_arrow()

    def files(self, tick: int | None, filters: Sequence[tuple[str, str, Any]]) -> list[str]:
        """The version's data files whose statistics do not exclude ``filters``."""
        if self.format == "delta":
            table = self._delta(tick)
            uris = table.file_uris(file_pruning_predicate=list(filters) or None)
            return [uri.removeprefix("file://") for uri in uris]
        table, snapshot = self._iceberg(tick)
        if snapshot is None:
            return []
        scan = table.scan(row_filter=_iceberg_filter(filters), snapshot_id=snapshot.snapshot_id)
        found = []
        for task in scan.plan_files():
            if task.delete_files:
                raise LakeError(
                    f"{NAME}: {self.path} has delete files, which this source does not read"
                )
            found.append(task.file.file_path.removeprefix("file://"))
        return found


def _iceberg_filter(filters: Sequence[tuple[str, str, Any]]):
    from pyiceberg import expressions as ex

    made = {
        "=": ex.EqualTo, ">": ex.GreaterThan, ">=": ex.GreaterThanOrEqual,
        "<": ex.LessThan, "<=": ex.LessThanOrEqual,
    }  # fmt: skip
    terms = [
        ex.In(name, set(value)) if op == "in" else made[op](name, value)
        for name, op, value in filters
    ]
    if not terms:
        return ex.AlwaysTrue()
    return terms[0] if len(terms) == 1 else ex.And(*terms)


def _tick(options) -> int | None:
    given = options.get("tick")
    if given is None:
        return None
    try:
        return int(given)
    except ValueError:
        raise LakeError(f"{NAME}: option tick must be a tick number, not {given!r}") from None


class LakeSource(DataSource):
    """``spark.read.format("pgferry-lake").load(PATH)``, options ``tick``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _table(self) -> _Table:
        path = self.options.get("path")
        if not path:
            raise LakeError(f"{NAME}: give the lake table's path: .load(PATH)")
        return _Table.at(path)

    def schema(self) -> StructType:
        from pyspark.sql.pandas.types import from_arrow_schema

        schema = self._table().arrow_schema(_tick(self.options))
        wanted = self.options.get("columns")
        if wanted:
            # Spark tells a Python data source no required columns: this option does.
            names = [name.strip() for name in wanted.split(",") if name.strip()]
            missing = [name for name in names if name not in schema.names]
            if missing:
                raise LakeError(f"{NAME}: no column {missing[0]!r} in {self._table().path}")
            schema = schema.__class__([schema.field(name) for name in names])
        return from_arrow_schema(schema)

    def reader(self, schema: StructType) -> LakeReader:
        return LakeReader(self._table(), _tick(self.options), schema)


class LakeReader(DataSourceReader):
    """Plans one partition per data file of the version; reads each with pyarrow."""

    def __init__(self, table: _Table, tick: int | None, schema: StructType) -> None:
        self.table = table
        self.tick = tick
        self.columns = [field.name for field in schema.fields]
        self.arrow = table.arrow_schema(tick)
        self.pushed: list[tuple[str, str, Any]] = []
        self.nulls: list[tuple[str, bool]] = []  # (column, must be null)

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        # Spark may hand this reader again, already given the filters of an earlier query
        # of the same DataFrame: each call starts afresh.
        self.pushed, self.nulls = [], []
        kinds = {f.name: str(f.type) for f in self.arrow}
        left = []
        for given in filters:
            kind = kinds.get(given.attribute[0], "") if len(given.attribute) == 1 else ""
            if not kind.startswith(_PUSHABLE_KINDS):
                left.append(given)  # a nested field, a timestamp, a decimal...: Spark's
                continue
            column = given.attribute[0]
            if isinstance(given, (IsNull, IsNotNull)):
                self.nulls.append((column, isinstance(given, IsNull)))
            elif type(given) in _OPS and _plain(given.value):
                self.pushed.append((column, _OPS[type(given)], given.value))
            else:
                left.append(given)
        return left

    def partitions(self) -> list[InputPartition]:
        files = self.table.files(self.tick, self.pushed)
        return [InputPartition(path) for path in files]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.dataset as ds

        schema = pa.schema([self.arrow.field(name) for name in self.columns])
        # The table's schema: columns added after a file was written read as NULL.
        data = ds.dataset([partition.value], schema=self.arrow, format="parquet")
        scanner = data.scanner(columns=self.columns, filter=_row_filter(self.pushed, self.nulls))
        for batch in scanner.to_batches():
            if batch.num_rows:
                yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def _plain(value: Any) -> bool:
    values = value if isinstance(value, (tuple, list)) else (value,)
    return all(
        v is not None and isinstance(v, (int, float, str, bool, dt.date))
        and not isinstance(v, dt.datetime)
        for v in values
    )  # fmt: skip


def _row_filter(pushed: Sequence[tuple[str, str, Any]], nulls: Sequence[tuple[str, bool]]):
    import operator

    import pyarrow.dataset as ds

    compare = {"=": operator.eq, ">": operator.gt, ">=": operator.ge, "<": operator.lt,
               "<=": operator.le}  # fmt: skip
    made = None
    for column, op, value in pushed:
        field = ds.field(column)
        term = field.isin(list(value)) if op == "in" else compare[op](field, value)
        made = term if made is None else made & term
    for column, is_null in nulls:
        term = ds.field(column).is_null() if is_null else ds.field(column).is_valid()
        made = term if made is None else made & term
    return made
