"""The ``pgferry`` streaming data source: a queue's row events as a Spark stream.

Spark 4's Python data source API.  :class:`PgferrySource` names the format and the
schema; :class:`ChangeFeedReader` is its stream reader: offsets ``{"tick": N, "time": T}``
(the provider's time of tick N: a restarted query whose provider's tick N is another tick
fails, naming the diverged provider; an offset without a time is still read), admission
control (``maxEventsPerTrigger``, in whole ticks), ``Trigger.AvailableNow`` (the newest
tick when the query starts is its last), and ``commit`` moving the queue's consumer.  With
``snapshot``, a new query's first offset is ``{"tick": N, "snapshot": 0}`` and its first
batch, up to ``{"tick": N}``, the tables' rows at tick N.  With ``typed``, ``data`` and
``old_data`` are structs of the table's columns (:func:`typed_schema`).
Spark constructs the reader twice, on the driver where it plans micro-batches and in the
worker that ships its ``read`` to the executors, so it holds only plain values; the
connection is opened by the first driver call (:class:`pgferry.stream.feed.Feed`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pgferry.errors import PgferryError
from pgferry.stream.feed import COLUMNS, Feed, Span, parse_options, read_chunks
from pgferry.stream.snapshot import TableSnapshot
from pgferry.stream.typed import column_types

F = TypeVar("F", bound=Callable)


def one_line(method: F) -> F:
    """A PgferryError of a driver-side call reaches Spark as its one line, without the
    Python traceback Spark would put in the query's exception.  These calls run in a
    process of their own that ends with the error, so its environment is ours to set."""

    @functools.wraps(method)
    def call(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except PgferryError:
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
            raise

    return call  # type: ignore[return-value]


# Spark's type and the Arrow type read() hands it, per column; the rest are strings.
_LONG = (LongType(), pa.int64())
_TIME = (TimestampType(), pa.timestamp("us", tz="UTC"))
_TYPES = {
    name: {"tick_id": _LONG, "ev_id": _LONG, "committed_at": _TIME, "ev_time": _TIME}.get(
        name, (StringType(), pa.string())
    )
    for name in COLUMNS
}
_NOT_NULL = ("tick_id", "ev_id", "table", "op", "committed_at")
SCHEMA = StructType(
    [
        StructField(name, spark_type, nullable=name not in _NOT_NULL)
        for name, (spark_type, _) in _TYPES.items()
    ]
)
ARROW_SCHEMA = pa.schema(
    [pa.field(name, kind, nullable=name not in _NOT_NULL) for name, (_, kind) in _TYPES.items()]
)


# The typed feed: each declaration of typed.column_types with its Spark and Arrow types.
_SCALARS: dict[str, tuple[DataType, pa.DataType]] = {
    "int2": (ShortType(), pa.int16()),
    "int4": (IntegerType(), pa.int32()),
    "int8": (LongType(), pa.int64()),
    "float4": (FloatType(), pa.float32()),
    "float8": (DoubleType(), pa.float64()),
    "bool": (BooleanType(), pa.bool_()),
    "text": (StringType(), pa.string()),
    "timestamptz": (TimestampType(), pa.timestamp("us", tz="UTC")),
    "timestamp": (TimestampNTZType(), pa.timestamp("us")),
    "date": (DateType(), pa.date32()),
    "bytea": (BinaryType(), pa.binary()),
}


def typed(declaration: str) -> tuple[DataType, pa.DataType]:
    """The Spark and Arrow types of a column's declaration."""
    if declaration.endswith("[]"):
        spark_type, arrow_type = typed(declaration[:-2])
        return ArrayType(spark_type), pa.list_(arrow_type)
    if declaration.startswith("numeric("):
        precision, scale = (int(n) for n in declaration[8:-1].split(","))
        return DecimalType(precision, scale), pa.decimal128(precision, scale)
    return _SCALARS[declaration]


def declaration(spark_type: DataType) -> str:
    """The declaration a Spark type of the typed schema was made from (its inverse)."""
    if isinstance(spark_type, ArrayType):
        return declaration(spark_type.elementType) + "[]"
    if isinstance(spark_type, DecimalType):
        return f"numeric({spark_type.precision},{spark_type.scale})"
    return next(name for name, (kind, _) in _SCALARS.items() if kind == spark_type)


def typed_schema(columns: list[tuple[str, str]]) -> StructType:
    """The typed feed's schema: the feed's columns with ``data`` and ``old_data`` structs
    of the table's columns, and ``statement`` (an ``S`` row's text)."""
    image = StructType([StructField(name, typed(decl)[0]) for name, decl in columns])
    fields = [StructField(f.name, image) if f.name in ("data", "old_data") else f for f in SCHEMA]
    return StructType([*fields, StructField("statement", StringType())])


def table_columns(schema: StructType) -> list[tuple[str, str]]:
    """The typed schema's table columns with their declarations, as the executors read them."""
    image = schema["data"].dataType
    assert isinstance(image, StructType)
    return [(f.name, declaration(f.dataType)) for f in image.fields]


class PgferrySource(DataSource):
    """``spark.readStream.format("pgferry")``: options ``provider``, ``queue``,
    ``consumer``, ``tables``, ``ddl``, ``typed``, ``snapshot``, ``maxEventsPerTrigger``,
    ``partitionEvents``."""

    @classmethod
    def name(cls) -> str:
        return "pgferry"

    @one_line
    def schema(self) -> StructType:
        options = parse_options(self.options)  # a bad option fails at load()
        if options.typed:
            # The table's columns when the query is defined: a column added later is not in
            # the struct until the query is defined again.
            return typed_schema(column_types(options.provider, options.tables[0]))
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ChangeFeedReader(self.options, schema)


class SpansPartition(InputPartition):
    """The spans one Spark task reads and the tables it keeps (quoted as events name
    them, resolved on the driver; empty: all): plain values, pickled to the executor."""

    def __init__(self, spans: tuple[Span, ...], tables: tuple[str, ...]) -> None:
        super().__init__(spans)
        self.spans = spans
        self.tables = tables


class SnapshotPartition(InputPartition):
    """Tables read in the snapshot of a new query's first tick (plain values)."""

    def __init__(self, reads: tuple[TableSnapshot, ...]) -> None:
        super().__init__(reads)
        self.reads = reads


class ChangeFeedReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of whole ticks; see the module's docstring."""

    def __init__(self, options, schema: StructType | None = None) -> None:
        self.options = parse_options(options)
        self.columns = table_columns(schema) if self.options.typed and schema else None
        self._feed: Feed | None = None
        self._upto: int | None = None  # the last tick of an AvailableNow run
        self._initial: dict | None = None  # a snapshot query's first offset

    def __getstate__(self) -> dict:
        # Shipped to the executors with read(): everything but the driver's connection.
        return {**self.__dict__, "_feed": None}

    @property
    def feed(self) -> Feed:
        if self._feed is None:
            feed = Feed(self.options)
            feed.open()
            self._feed = feed
        return self._feed

    @one_line
    def initialOffset(self) -> dict:
        if self.options.snapshot:
            # The first batch, from here to {"tick": N}, is the tables' rows at tick N.
            # Spark asks again for the first batch's start: one snapshot per query.
            if self._initial is None:
                tick = self.feed.take_snapshot()
                self._initial = {**self.feed.offset(tick), "snapshot": 0}
            return self._initial
        return self.feed.offset(self.feed.position())

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_events is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_events)

    @one_line
    def prepareForTriggerAvailableNow(self) -> None:
        self._upto = self.feed.newest()

    @one_line
    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        max_events = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        # Every batch starts here: a restarted query, or one whose provider failed over,
        # reads on only from the very tick it stopped at.
        begin = self.feed.check(start)
        if "snapshot" in start:
            return self.feed.offset(begin)  # the snapshot's batch: its rows alone
        if self._upto is not None and begin >= self._upto:
            return self.feed.offset(begin)
        return self.feed.offset(self.feed.latest(begin, max_events, self._upto))

    @one_line
    def reportLatestOffset(self) -> dict | None:
        return self.feed.offset(self.feed.newest())

    @one_line
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        feed = self.feed
        # A restarted query plans its last batch again from the checkpoint's offsets.
        begin, finish = feed.check(start), feed.check(end)
        if "snapshot" in start:
            # One task per table (a table is read whole in the one snapshot).
            return [SnapshotPartition((read,)) for read in feed.snapshot_reads(begin)]
        if finish <= begin:
            return []
        return [SpansPartition(part, feed.tables) for part in feed.partitions(begin, finish)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Arrow batches rather than tuples: Spark would convert each tuple in Python.
        opts = self.options
        if isinstance(partition, SnapshotPartition):
            reads = partition.reads
            spans = tuple(Span(r.tick, r.tick_time, r.query) for r in reads)
            chunks = read_chunks(
                opts.provider, (), spans, False, self.columns, reads[0].snapshot_id
            )
        else:
            assert isinstance(partition, SpansPartition)
            chunks = read_chunks(
                opts.provider, partition.tables, partition.spans, opts.ddl, self.columns
            )
        for chunk in chunks:
            if self.columns is None:
                columns = zip(*chunk, strict=True)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(v, type=f.type) for f, v in zip(ARROW_SCHEMA, columns, strict=True)],
                    schema=ARROW_SCHEMA,
                )
            else:
                yield typed_batch(chunk, self.columns)

    @one_line
    def commit(self, end: dict) -> None:
        if "snapshot" not in end:
            # Spark is done with the snapshot's batch (or never planned it): let it go.
            self.feed.release_snapshot()
        self.feed.commit(int(end["tick"]))

    def stop(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None


def typed_batch(chunk: list[tuple], columns: list[tuple[str, str]]) -> pa.RecordBatch:
    """A typed chunk of :func:`pgferry.stream.feed.read_chunks` as Arrow: ``data`` and
    ``old_data`` structs of the table's columns (null where the row has no image)."""
    fields = [pa.field(name, typed(decl)[1]) for name, decl in columns]
    arrays: list[pa.Array] = []
    schema: list[pa.Field] = []
    for index, (name, (_, kind)) in enumerate([*_TYPES.items(), ("statement", (None, None))]):
        values = [row[index] for row in chunk]
        if name in ("data", "old_data"):
            children = [
                pa.array([v[n] if v is not None else None for v in values], type=f.type)
                for n, f in enumerate(fields)
            ]
            mask = pa.array([v is None for v in values], type=pa.bool_())
            arrays.append(pa.StructArray.from_arrays(children, fields=fields, mask=mask))
        else:
            arrays.append(pa.array(values, type=kind or pa.string()))
        schema.append(pa.field(name, arrays[-1].type, nullable=name not in _NOT_NULL))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(schema))
