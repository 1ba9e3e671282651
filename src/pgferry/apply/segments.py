"""One segment of a batch applied: the part of the batch between queued scripts, inside
the batch's transaction.

A segment's replay runs one way through its stages: what the provider has of its tables
(:func:`pgferry.apply.shapes.plan_inputs`, with the segment's summary), its plan
(:meth:`~pgferry.apply.plan.PlanInputs.plan`), the readers of its parts (inline, reader
threads or Spark tasks, :mod:`.readers`; the next batch's reads started meanwhile,
:mod:`.prefetch`) and the apply of the parts as they arrive, on the worker's connection
(:func:`pgferry.apply.stage_apply.apply_segment`) or shared with a second one
(:func:`pgferry.apply.second_apply.apply_segment_apart`).

:class:`Reading` is what the batch's strategy (:mod:`.strategy`) decided for all of its
segments; :class:`Segments` keeps between batches what the segments are read with (the
reader threads' pool).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from pgferry.apply import shapes
from pgferry.apply.batch_sql import Segment, SummaryRow
from pgferry.apply.prefetch import NextBatch, Prefetcher
from pgferry.apply.readers import InlineReads, PartReads, ReaderPool
from pgferry.apply.script_shapes import LaterChanges
from pgferry.apply.second_apply import SecondApply, apply_segment_apart, share_out
from pgferry.apply.spark_session import WorkerSpark
from pgferry.apply.stage_apply import ApplyStats, apply_segment
from pgferry.apply.stages import StageTables
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.registry.routes import Route


@dataclass(frozen=True)
class Reading:
    """How the segments of one batch are read and applied."""

    queue: str
    batch_id: int
    tick_id: int
    tick_time: datetime | None
    batch_sql: str
    seqs: list[str]
    use_spark: bool  # by Spark tasks (the session is up and the batch is large)
    read_ahead: bool  # by reader threads ahead of the apply (else inline)
    started: bool = False  # its reads were started while the batch before it was applied
    apart: bool = False  # some tables may go to the second connection (second_apply.py)
    consumer: str = ""
    read_next: int | None = None  # read the next batch meanwhile, of up to so many events

    @property
    def ranges(self) -> bool:
        """Large tables are planned in ev_id ranges (read in parallel)."""
        return self.read_ahead or self.use_spark

    @property
    def whole_updates(self) -> bool:
        """Only tables that saw nothing but inserts are split into ranges: a Spark task
        hands its whole part to the driver, there ranges bound memory; with two applying
        connections a table in ranges starts its apply after a range."""
        return not self.use_spark and not self.apart


class Segments:
    """The segments of the worker's batches, and the reader threads kept for them between
    batches (:meth:`close_readers` when the provider changes or the worker disconnects)."""

    def __init__(
        self,
        spark: WorkerSpark,
        table_shapes: shapes.TableShapes,
        stages: StageTables,
        second: SecondApply,
        ahead: Prefetcher,
    ) -> None:
        self.provider_dsn = ""
        self.spark = spark
        self.shapes = table_shapes
        self.stages = stages
        self.second = second
        self.ahead = ahead  # the next batch, read while this one is applied
        self.readers: ReaderPool | None = None

    def close_readers(self) -> None:
        self.ahead.close()
        if self.readers is not None:
            self.readers.close()
            self.readers = None

    def reader_pool(self, settings: ReplaySettings) -> ReaderPool:
        if self.readers is None:
            self.readers = ReaderPool(self.provider_dsn, settings.read_ahead)
        return self.readers

    def replay(
        self,
        settings: ReplaySettings,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        reading: Reading,
        routes: dict[str, Route],
        segment: Segment,
        summary: list[SummaryRow],
        later: LaterChanges | None = None,
        done: frozenset[str] = frozenset(),
    ) -> ApplyStats:
        """Apply one segment of ``reading``'s batch (``summary``: its own) in the open
        transaction on ``local``; the tables in ``done`` were applied already."""
        batch_sql, use_spark = reading.batch_sql, reading.use_spark
        # The provider's catalog already shows what scripts later in the batch change.
        routes = shapes.provider_routes(routes, later)
        inputs = shapes.plan_inputs(
            self.shapes,
            settings,
            provider,
            local,
            routes,
            summary=summary,
            batch_sql=batch_sql,
            later=later,
        )
        plan = inputs.plan(
            summary,
            routes,
            reading.seqs,
            ranges=reading.ranges,
            whole_updates=reading.whole_updates,
        )
        plan.tables = [w for w in plan.tables if w.table_name not in done]
        # How the parts are read: inline, by reader threads (those started ahead taken
        # when the plan asks for the same queries) or by Spark tasks.
        readers = None
        if use_spark and plan.tables:
            readers = self.spark.readers(reading.batch_id, self.provider_dsn, settings.read_parts)
        elif (reading.read_ahead or use_spark) and len(plan.tables) > 1:
            readers = self.reader_pool(settings)
            if reading.started and self.ahead.pool is not None:
                readers = self.ahead.pool
        if reading.started and readers is not self.ahead.pool:
            self.ahead.drop_reads()
        # Some tables may go to the second connection (never a table of this one's).
        apart = frozenset[str]()
        if reading.apart and readers is not None and self.second.available(local):
            active = [r for r in routes.values() if r.applies]
            apart = share_out(plan.tables, self.second.eligible(local, active))
        if reading.read_next is not None and readers is not None and readers is self.readers:
            # Started now (the apply takes them: the same queries), so that the next
            # batch's reads wait for these.
            readers.start_ahead(
                [(w.table_name, w.query(batch_sql, segment), w.binary) for w in plan.tables]
            )
        # The parts as read, for the apply to enter (no read starts before it does); with
        # a second connection, as two streams.
        split = None
        if apart and readers is not None:
            split = readers.split_parts(plan.tables, batch_sql, segment, apart)
        reads: PartReads = readers if readers is not None else InlineReads(provider)
        parts = reads.parts(plan.tables, batch_sql, segment)
        if reading.read_next is not None:
            # The next batch is read while this one is applied; its reads are planned as
            # this one's are (a large batch is read by Spark tasks instead).
            ahead_inputs = None
            if not self.spark.running():
                ahead_inputs = shapes.plan_inputs(self.shapes, settings, provider, local, routes)
            want = NextBatch(
                reading.queue,
                reading.consumer,
                reading.tick_id,
                reading.read_next,
                routes,
                list(reading.seqs),
                ahead_inputs,
            )
            self.ahead.start(
                self.provider_dsn, settings.read_ahead, self.reader_pool(settings), want
            )
        if split is not None:
            return apply_segment_apart(
                local,
                self.stages,
                plan,
                split,
                self.second,
                apart,
                queue=reading.queue,
                consumer=reading.consumer,
                tick_id=reading.tick_id,
                tick_time=reading.tick_time,
            )
        return apply_segment(
            local,
            self.stages,
            plan,
            parts,
            queue=reading.queue,
            tick_id=reading.tick_id,
            tick_time=reading.tick_time,
        )
