"""A lake leaf's tables read by ``spark.read``: the ``pgferry-lake`` Python data source.

``pgferry.stream.lake_source.register(spark)`` once per session, then::

    spark.read.format("pgferry-lake").load("/lake/public/orders")     # newest version
    spark.read.format("pgferry-lake").option("tick", 4711).load(path)  # as of a tick
    spark.read.format("pgferry-lake").option("columns", "id,amount").load(path)

The path is a lake table pgferry writes (``DIR/<schema>/<table>``): a Delta table read
through delta-rs's log, an Iceberg table through pgferry's SQL catalog of that lake
(``DIR/pgferry_catalog.db``); no jar is needed.  ``tick`` picks the newest version whose
commit carries ``pgferry.tick`` at most that tick (as ``compare`` reads the lake).

On the driver the reader lists the version's Parquet files and makes one input partition
per file; the executors read their file with pyarrow and hand Arrow batches to Spark.
An Iceberg file's columns are found by field id (pyiceberg sanitises names such as
``Mixed Col`` in its files), a Delta file's by name.
Spark (4.3) tells a Python data source no required columns: the ``columns`` option names
the ones to read (default: all).  The source takes no filters: Spark evaluates them after
the scan.  Spark 4.3 hands a later query of the same DataFrame, whose filters it cannot
push, the reader an earlier query gave its filters to, so a source that kept them would
return that query's rows (seen here: ``now.where("id > 10050")`` and then
``now.where("n > 400 or v = 'new'")`` read only keys above 10050).  An Iceberg table
written merge-on-read has position delete files: each partition carries the delete files
that apply to its data file (as pyiceberg's scan plans them), and the executor leaves out
the rows at the positions they name for that file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pgferry.lake.spec import LakeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

NAME = "pgferry-lake"


def register(spark: SparkSession) -> None:
    """Make ``format("pgferry-lake")`` known to ``spark``.  The workers run the interpreter
    chosen as for the change feed (:func:`pgferry.stream.worker_python`)."""
    from pgferry.stream import register_source

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

    def files(self, tick: int | None, filters: Sequence[tuple[str, str, Any]]) -> list[_File]:
        """The version's data files whose statistics do not exclude ``filters``."""
        if self.format == "delta":
            table = self._delta(tick)
            uris = table.file_uris(file_pruning_predicate=list(filters) or None)
            return [_File(uri.removeprefix("file://")) for uri in uris]
        table, snapshot = self._iceberg(tick)
        if snapshot is None:
            return []
        scan = table.scan(row_filter=_iceberg_filter(filters), snapshot_id=snapshot.snapshot_id)
        return [
            _File(task.file.file_path.removeprefix("file://"), task.file.file_path,
                  tuple(sorted(d.file_path for d in task.delete_files)))
            for task in scan.plan_files()
        ]  # fmt: skip


@dataclass(frozen=True)
class _File:
    """One input partition: a data file, and the position delete files that apply to it
    (Iceberg merge-on-read), which name it as ``name`` (the path as the metadata has it)."""

    path: str
    name: str = ""
    deletes: tuple[str, ...] = ()


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
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_schema

        schema = self._table().arrow_schema(_tick(self.options))
        wanted = self.options.get("columns")
        if wanted:
            # Spark tells a Python data source no required columns: this option does.
            names = [name.strip() for name in wanted.split(",") if name.strip()]
            missing = [name for name in names if name not in schema.names]
            if missing:
                raise LakeError(f"{NAME}: no column {missing[0]!r} in {self._table().path}")
            schema = pa.schema([schema.field(name) for name in names])
        return from_arrow_schema(schema)

    def reader(self, schema: StructType) -> LakeReader:
        return LakeReader(self._table(), _tick(self.options), schema)


class LakeReader(DataSourceReader):
    """Plans one partition per data file of the version; reads each with pyarrow."""

    def __init__(self, table: _Table, tick: int | None, schema: StructType) -> None:
        self.table = table
        self.tick = tick
        self.columns = [field.name for field in schema.fields]
        self.spark_schema = schema
        self.arrow = table.arrow_schema(tick)

    def partitions(self) -> list[InputPartition]:
        files = self.table.files(self.tick, [])
        return [InputPartition(file) for file in files]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.dataset as ds
        from pyspark.sql.pandas.types import to_arrow_schema

        # What Spark expects: pyiceberg's large strings and field ids cast away.
        schema = to_arrow_schema(self.spark_schema)
        file: _File = partition.value
        if self.table.format == "iceberg":
            yield from _read_iceberg_file(file, self.arrow, self.columns, schema)
            return
        # The table's schema: columns added after a file was written read as NULL.
        data = ds.dataset([file.path], schema=self.arrow, format="parquet")
        scanner = data.scanner(columns=self.columns)
        for batch in scanner.to_batches():
            if batch.num_rows:
                yield pa.Table.from_batches([batch]).cast(schema).to_batches()[0]


_FIELD_ID = b"PARQUET:field_id"


def _field_id(field) -> bytes | None:
    return (field.metadata or {}).get(_FIELD_ID)


def _iceberg_columns(file_schema, table_schema) -> dict[str, str]:
    """Each table column the file holds -> its name in the file.  By Iceberg field id when
    the file has them: pyiceberg writes them, under names it sanitises (``Mixed Col`` is
    ``Mixed_x20Col``).  Else by name: the initial load's files, added to the table as
    written, carry no field ids and the columns' own names."""
    ids = {_field_id(f): f.name for f in file_schema if _field_id(f) is not None}
    if not ids:
        return {name: name for name in table_schema.names if name in file_schema.names}
    return {f.name: ids[_field_id(f)] for f in table_schema if _field_id(f) in ids}


def _deleted(data: _File):
    """The positions of ``data``'s rows its delete files remove (an Arrow array)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found = [
        rows.filter(pc.equal(rows["file_path"], data.name))["pos"]
        for rows in (pq.read_table(path.removeprefix("file://"), columns=["file_path", "pos"])
                     for path in data.deletes)
    ]  # fmt: skip
    chunks = [c for arr in found for c in arr.chunks]
    return pa.chunked_array(chunks, pa.int64()).combine_chunks() if chunks else None


def _read_iceberg_file(data: _File, table_schema, columns: Sequence[str],
                       schema) -> Iterator[Any]:  # fmt: skip
    """One Iceberg data file's rows as batches of ``schema``, less the rows its position
    delete files remove; a column added after the file was written reads as NULL."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    file = pq.ParquetFile(data.path)
    gone = _deleted(data) if data.deletes else None
    found = _iceberg_columns(file.schema_arrow, table_schema)
    wanted = [found[name] for name in columns if name in found]
    if wanted:
        batches = file.iter_batches(columns=wanted)
    else:  # none of the columns asked for is in the file: only its row count
        batches = iter([pa.record_batch([pa.nulls(file.metadata.num_rows)], names=["_"])])
    start = 0
    for batch in batches:
        first, start = start, start + batch.num_rows
        if gone is not None and len(gone):
            at = pa.array(range(first, start), pa.int64())
            batch = batch.filter(pc.invert(pc.is_in(at, value_set=gone)))
        if not batch.num_rows:
            continue
        arrays = [
            batch.column(found[name]) if name in found
            else pa.nulls(batch.num_rows, schema.field(name).type)
            for name in columns
        ]  # fmt: skip
        yield pa.Table.from_arrays(arrays, names=list(columns)).cast(schema).to_batches()[0]
