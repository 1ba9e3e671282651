"""One segment of a batch applied: the part of the batch between queued scripts, inside
the batch's transaction.

A segment's replay runs one way through its stages: what the provider has of its tables
(:func:`pgferry.apply.shapes.plan_inputs`, with the segment's summary), its plan
(:meth:`~pgferry.apply.plan.PlanInputs.plan`), the way it is replayed, made from the
batch's :class:`~pgferry.apply.strategy.Strategy` and the reader threads kept here (a
:class:`~pgferry.apply.stage_apply.SegmentWay`: its parts read inline, by reader threads
or by Spark tasks, :mod:`.readers`, and applied on the worker's connection,
:class:`~pgferry.apply.stage_apply.OneConnection`, or shared with a second one,
:class:`~pgferry.apply.second_apply.TwoConnections`), the next batch's reads started
meanwhile (:mod:`.prefetch`), then the way's ``read`` and ``apply``.

:class:`Reading` is what the batch's strategy decided for all of its segments;
:class:`Segments` keeps between batches what the segments are read with (the reader
threads' pool).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pgferry.apply import shapes
from pgferry.apply.batch_sql import Segment, SummaryRow
from pgferry.apply.plan import SegmentPlan
from pgferry.apply.prefetch import NextBatch, Prefetcher
from pgferry.apply.readers import InlineReads, ReaderPool
from pgferry.apply.script_shapes import LaterChanges
from pgferry.apply.second_apply import SecondApply, TwoConnections, share_out
from pgferry.apply.spark_session import WorkerSpark
from pgferry.apply.stage_apply import ApplyStats, OneConnection, SegmentWay
from pgferry.apply.stages import StageTables
from pgferry.apply.strategy import Reads, Strategy
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
    how: Strategy  # what strategy.choose decided for the batch
    started: bool = False  # its reads were started while the batch before it was applied
    consumer: str = ""
    read_next: int | None = None  # read the next batch meanwhile, of up to so many events


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
        batch_sql, how = reading.batch_sql, reading.how
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
            ranges=how.ranges,
            whole_updates=how.whole_updates,
        )
        plan.tables = [w for w in plan.tables if w.table_name not in done]
        pool = self._pool(settings, reading, how.segment_reads(len(plan.tables)))
        way = self._way(local, provider, reading, routes, plan, pool)
        if reading.read_next is not None and pool is not None and pool is self.readers:
            # Started now (the apply takes them: the same queries), so that the next
            # batch's reads wait for these.
            pool.start_ahead(
                [(w.table_name, w.query(batch_sql, segment), w.binary) for w in plan.tables]
            )
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
        # The parts as the way reads them, handed to its apply, which enters them (no read
        # starts before it does).
        return way.apply(local, plan, way.read(plan, batch_sql, segment))

    def _pool(self, settings: ReplaySettings, reading: Reading, reads: Reads) -> ReaderPool | None:
        """The readers of a segment read by threads (those started ahead taken when the
        plan asks for the same queries) or Spark tasks; None: read inline."""
        pool = None
        if reads == "spark":
            pool = self.spark.readers(reading.batch_id, self.provider_dsn, settings.read_parts)
        elif reads == "threads":
            pool = self.reader_pool(settings)
            if reading.started and self.ahead.pool is not None:
                pool = self.ahead.pool
        if reading.started and pool is not self.ahead.pool:
            self.ahead.drop_reads()
        return pool

    def _way(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        reading: Reading,
        routes: dict[str, Route],
        plan: SegmentPlan,
        pool: ReaderPool | None,
    ) -> SegmentWay[Any]:
        """The segment's way: its parts read by ``pool`` (else inline) and applied on the
        worker's connection, or some tables on the second one (never a table of this
        one's) when the strategy allows it and any may go there."""
        stages, queue = self.stages, reading.queue
        tick_id, tick_time = reading.tick_id, reading.tick_time
        if reading.how.apart and pool is not None and self.second.available(local):
            active = [r for r in routes.values() if r.applies]
            apart = share_out(plan.tables, self.second.eligible(local, active))
            if apart:
                return TwoConnections(
                    pool, stages, self.second, apart, queue=queue, consumer=reading.consumer,
                    tick_id=tick_id, tick_time=tick_time,
                )  # fmt: skip
        reads = pool if pool is not None else InlineReads(provider)
        return OneConnection(reads, stages, queue=queue, tick_id=tick_id, tick_time=tick_time)
