"""The ``pgferry`` streaming data source: a queue's row events as a Spark stream.

Spark 4's Python data source API.  :class:`PgferrySource` names the format and the
schema; :class:`ChangeFeedReader` is its stream reader: offsets ``{"tick": N}``, admission
control (``maxEventsPerTrigger``, in whole ticks), ``Trigger.AvailableNow`` (the newest
tick when the query starts is its last), and ``commit`` moving the queue's consumer.
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
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from pgferry.errors import PgferryError
from pgferry.stream.feed import COLUMNS, Feed, Span, parse_options, read_chunks

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


class PgferrySource(DataSource):
    """``spark.readStream.format("pgferry")``: options ``provider``, ``queue``,
    ``consumer``, ``tables``, ``ddl``, ``maxEventsPerTrigger``, ``partitionEvents``."""

    @classmethod
    def name(cls) -> str:
        return "pgferry"

    @one_line
    def schema(self) -> StructType:
        parse_options(self.options)  # a bad option fails at load(), before any query starts
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ChangeFeedReader(self.options)


class SpansPartition(InputPartition):
    """The spans one Spark task reads and the tables it keeps (quoted as events name
    them, resolved on the driver; empty: all): plain values, pickled to the executor."""

    def __init__(self, spans: tuple[Span, ...], tables: tuple[str, ...]) -> None:
        super().__init__(spans)
        self.spans = spans
        self.tables = tables


class ChangeFeedReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of whole ticks; see the module's docstring."""

    def __init__(self, options) -> None:
        self.options = parse_options(options)
        self._feed: Feed | None = None
        self._upto: int | None = None  # the last tick of an AvailableNow run

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
        return {"tick": self.feed.position()}

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
        begin = int(start["tick"])
        if self._upto is not None and begin >= self._upto:
            return {"tick": begin}
        return {"tick": self.feed.latest(begin, max_events, self._upto)}

    @one_line
    def reportLatestOffset(self) -> dict | None:
        return {"tick": self.feed.newest()}

    @one_line
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = int(start["tick"]), int(end["tick"])
        if finish <= begin:
            return []
        feed = self.feed
        return [SpansPartition(part, feed.tables) for part in feed.partitions(begin, finish)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Arrow batches rather than tuples: Spark would convert each tuple in Python.
        assert isinstance(partition, SpansPartition)
        for chunk in read_chunks(
            self.options.provider, partition.tables, partition.spans, self.options.ddl
        ):
            columns = zip(*chunk, strict=True)
            yield pa.RecordBatch.from_arrays(
                [pa.array(v, type=f.type) for f, v in zip(ARROW_SCHEMA, columns, strict=True)],
                schema=ARROW_SCHEMA,
            )

    @one_line
    def commit(self, end: dict) -> None:
        self.feed.commit(int(end["tick"]))

    def stop(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None
