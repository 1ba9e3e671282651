"""The way one segment of a batch is replayed, made from the batch's strategy with what
replay keeps between batches for it.

:func:`pgferry.apply.replay.strategy.choose` only describes a batch's way (a
:class:`~pgferry.apply.replay.strategy.Strategy`); :meth:`Ways.make` turns it, once a segment is
planned, into the object that carries it out, a
:class:`~pgferry.apply.replay.one_connection.SegmentWay` whose ``read`` gives the parts' reads and
whose ``apply`` enters and applies them.  On its way it takes, in this order:

1. what reads the segment's parts (:meth:`~pgferry.apply.replay.strategy.Strategy.segment_reads`):
   Spark tasks (:meth:`~pgferry.apply.replay.spark_session.WorkerSpark.readers`), the reader
   threads kept here, or those the batch before started for this one
   (:mod:`.prefetch`); else the worker's provider connection
   (:class:`~pgferry.apply.replay.part_reads.InlineReads`);
2. when the next batch is read meanwhile, this segment's reads started first (so that the
   next batch's wait for them), then the next batch's (:class:`~.prefetch.Prefetcher`);
3. the connections that apply it: the tables the second connection may take
   (:func:`~pgferry.apply.replay.two_connections.share_out`), applied there and on the worker's
   (:class:`~pgferry.apply.replay.two_connections.TwoConnections`), or all on the worker's
   (:class:`~pgferry.apply.replay.one_connection.OneConnection`).

:class:`Ways` keeps the reader threads' pool between batches (:meth:`Ways.close_readers`
when the provider changes or the worker disconnects).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pgferry.apply.replay import shapes
from pgferry.apply.replay.batch_sql import Segment
from pgferry.apply.replay.one_connection import OneConnection, SegmentWay
from pgferry.apply.replay.part_reads import InlineReads, ReaderPool
from pgferry.apply.replay.plan import SegmentPlan
from pgferry.apply.replay.prefetch import NextBatch, Prefetcher
from pgferry.apply.replay.spark_session import WorkerSpark
from pgferry.apply.replay.stage_tables import StageTables
from pgferry.apply.replay.strategy import Strategy
from pgferry.apply.replay.two_connections import SecondApply, TwoConnections, share_out
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


class Ways:
    """The ways of the worker's segments, and the resources they are made with: Spark, the
    reader threads' pool (kept between batches), the stage tables, the second connection
    and the next batch read ahead."""

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
        self.shapes = table_shapes  # what the next batch's reads are planned with
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

    def make(
        self,
        reading: Reading,
        plan: SegmentPlan,
        segment: Segment,
        settings: ReplaySettings,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        routes: dict[str, Route],
    ) -> SegmentWay[Any]:
        """The way of ``plan``, ``segment`` of ``reading``'s batch, with its reads (those
        the apply takes over) and the next batch's started as the strategy says; see the
        module docstring.  ``routes``: the segment's, as the provider names its tables."""
        read_next = reading.read_next
        # 1. What reads its parts: Spark tasks, reader threads (those started ahead taken
        # when the plan asks for the same queries) or, without a pool, the worker's
        # provider connection.
        reads = reading.how.segment_reads(len(plan.tables))
        pool = None
        if reads == "spark":
            pool = self.spark.readers(reading.batch_id, self.provider_dsn, settings.read_parts)
        elif reads == "threads":
            pool = self.reader_pool(settings)
            if reading.started and self.ahead.pool is not None:
                pool = self.ahead.pool
        if reading.started and pool is not self.ahead.pool:
            self.ahead.drop_reads()
        # 2. The next batch is read while this one is applied; this segment's reads are
        # started first (the apply takes them: the same queries), so that the next
        # batch's wait for them.  Its reads are planned as this one's are (a large batch
        # is read by Spark tasks instead).
        if read_next is not None and pool is not None and pool is self.readers:
            pool.start_ahead(plan.tables, reading.batch_sql, segment)
        if read_next is not None:
            ahead_inputs = None
            if not self.spark.running():
                ahead_inputs = shapes.plan_inputs(self.shapes, settings, provider, local, routes)
            want = NextBatch(
                reading.queue,
                reading.consumer,
                reading.tick_id,
                read_next,
                routes,
                list(reading.seqs),
                ahead_inputs,
            )
            self.ahead.start(
                self.provider_dsn, settings.read_ahead, self.reader_pool(settings), want
            )
        # 3. Some tables may go to the second connection (never a table of this one's).
        if reading.how.apart and pool is not None and self.second.available(local):
            active = [r for r in routes.values() if r.applies]
            apart = share_out(plan.tables, self.second.eligible(local, active))
            if apart:
                return TwoConnections(
                    pool,
                    self.stages,
                    self.second,
                    apart,
                    queue=reading.queue,
                    consumer=reading.consumer,
                    tick_id=reading.tick_id,
                    tick_time=reading.tick_time,
                )
        return OneConnection(
            pool if pool is not None else InlineReads(provider),
            self.stages,
            queue=reading.queue,
            tick_id=reading.tick_id,
            tick_time=reading.tick_time,
        )
