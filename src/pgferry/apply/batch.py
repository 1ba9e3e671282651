"""The apply transaction of one batch, and what the worker keeps between batches for it.

One read of the batch's summary on the provider says what it holds, queued scripts and
removals included.  Then ONE subscriber transaction, committed durably, applies it: the
segments between queued scripts in ev_id order (each planned by :mod:`.segment_plans`,
read by :mod:`.read`, applied by :mod:`.stage_apply`), each script at its place
(:mod:`.script_replay`), the tables and sequences the provider removed detached
(:mod:`.removals`), the events forwarded into the branch's own queue, the copy filters
that can no longer match cleared, and the batch's tick recorded (the tick
and the rows commit together: that is what makes the apply exactly-once).  A small batch
that needs none of the statements around the rows goes to :mod:`.small_batch` instead:
the same transaction in two round trips.

:class:`Replayer` keeps, between batches, the registry's routes, what was learnt of the
tables' shapes, the stage tables, the reader connections and the next batch being read
ahead (:mod:`.prefetch`: its summary and reads replace this batch's when it is this one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TypedDict, cast

import psycopg

from pgferry.apply import forward, handover, script_replay, small_batch, strategy
from pgferry.apply import removals as removals_
from pgferry.apply.batch_sql import Segment, SummaryRow
from pgferry.apply.plan import PlanInputs, count_removals, count_scripts
from pgferry.apply.prefetch import Ahead, NextBatch, Prefetcher
from pgferry.apply.read import (
    PreparedBatch,
    ReplayError,
    TableShapes,
    read_removals,
    read_scripts,
    summarize,
)
from pgferry.apply.readers import ReaderPool
from pgferry.apply.routes import RouteCache
from pgferry.apply.script_shapes import LaterChanges, later_changes
from pgferry.apply.second_apply import SecondApply, apply_segment_apart, share_out
from pgferry.apply.segment_plans import Reading, plan_inputs, segment_plan
from pgferry.apply.spark_session import WorkerSpark
from pgferry.apply.stage_apply import ApplyStats, apply_segment, record_divergence
from pgferry.apply.stages import StageTables
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.handlers.api import HandlerContext
from pgferry.node import model
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import Batch
from pgferry.registry import copystate
from pgferry.registry.routes import Route, load_routes
from pgferry.scripts import skip

log = logging.getLogger(__name__)


class _TickAt(TypedDict):
    """Where a segment's apply records the batch: its queue and tick."""

    queue: str
    tick_id: int
    tick_time: datetime | None


class Replayer:
    """Applies the worker's batches; see the module docstring."""

    def __init__(
        self, settings: ReplaySettings, spark: WorkerSpark, handlers: HandlerContext
    ) -> None:
        self.settings = settings  # replaced on reload
        self.spark = spark
        self.handlers = handlers  # the worker's: the tables' handlers are built with it
        self.provider_dsn = ""
        self.shapes = TableShapes()
        self.stages = StageTables()
        self._readers: ReaderPool | None = None
        self.second = SecondApply()  # a large batch's second connection to the node
        self.ahead = Prefetcher()  # the next batch, read while this one is applied
        self._routes = RouteCache(handlers)
        self._recent: frozenset[str] | None = None  # the tables of the last small batch

    # --- state kept between batches ------------------------------------------------------
    def use_provider(self, dsn: str) -> None:
        """A new provider connection: what it has may differ."""
        self.provider_dsn = dsn
        self.forget_shapes()
        self.close_readers()

    def forget_shapes(self) -> None:
        """Drop what was learnt of the tables' shapes on both sides (they may have changed)."""
        self.shapes.forget()
        self.stages.reset()
        self.second.forget_tables()

    def close_readers(self) -> None:
        self.ahead.close()
        if self._readers is not None:
            self._readers.close()
            self._readers = None

    def _start_prefetch(
        self,
        provider: psycopg.Connection,
        local: psycopg.Connection,
        reading: Reading,
        consumer: str,
        routes: dict[str, Route],
        min_events: int,
    ) -> None:
        plan = None  # reads ahead are planned as _apply_segment plans them
        if not self.spark.running():  # else a large batch is read by Spark tasks
            plan = self._plan_inputs(provider, local, routes)
        want = NextBatch(
            reading.queue, consumer, reading.tick_id, min_events, routes, list(reading.seqs), plan
        )
        self.ahead.start(self.provider_dsn, self.settings.read_ahead, self._reader_pool(), want)

    def use_node(self, dsn: str) -> None:
        """A new connection to the node: the second one follows it."""
        self.second.use_node(dsn)

    def close(self) -> None:
        """The worker disconnects: readers go, the stage tables went with the session."""
        self.close_readers()
        self.stages.reset()
        self.second.close()

    def routes(
        self, local: psycopg.Connection, queue: str, signature: str | None = None
    ) -> dict[str, Route]:
        """The registry's routes (:class:`RouteCache`); new ones forget the shapes."""
        routes, fresh = self._routes.get(local, queue, signature)
        if fresh:
            self.forget_shapes()
        return routes

    def _reader_pool(self) -> ReaderPool:
        if self._readers is None:
            self._readers = ReaderPool(self.provider_dsn, self.settings.read_ahead)
        return self._readers

    def _prepared(
        self, provider: psycopg.Connection, batch: Batch, estimate: int | None
    ) -> PreparedBatch | None:
        """The batch's reads with its range as parameters, when it is read inline (see
        :mod:`.read`); None: with the range inlined."""
        if batch.events is None or estimate is None or estimate > self.settings.read_ahead_events:
            return None
        return PreparedBatch(queue_batches.generic_event_sql(provider), batch.events)

    # --- one batch -----------------------------------------------------------------------
    def apply(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        node: model.NodeInfo,
        batch: Batch,
        routes: dict[str, Route],
        seqs: list[str],
        catchup: copystate.CatchUp | None = None,
        *,
        ahead: Ahead | None = None,
        read_next: int | None = None,
    ) -> ApplyStats:
        """Apply ``batch`` and record its tick in one committed local transaction.

        With ``catchup`` the batch is a copied group's own (``routes`` are the group's
        tables): no script, removal, sequence or forwarding, and the group's position is
        recorded instead of the node's (removals come with the node's own stream, which
        also reads every event of the group's tables).
        ``ahead``: this batch as read ahead (:mod:`.prefetch`); ``read_next``: read the
        batch after this one meanwhile, of up to that many events (the worker takes it next).
        """
        try:
            return self._apply_batch(
                local, provider, node, batch, routes, seqs, catchup, ahead, read_next
            )
        except BaseException:
            self.stages.reset()  # stage tables created in the failed transaction are gone
            self.ahead.drop(reads=True)
            raise

    def _apply_batch(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        node: model.NodeInfo,
        batch: Batch,
        routes: dict[str, Route],
        seqs: list[str],
        catchup: copystate.CatchUp | None,
        ahead: Ahead | None,
        read_next: int | None,
    ) -> ApplyStats:
        queue, consumer = node.queue_name, node.consumer_name
        main = catchup is None  # the node's own stream (not a copied group's)
        batch_sql = batch.event_sql or queue_batches.batch_event_sql(provider, batch.batch_id)
        # Read ahead: used only for this very batch (the same event query: the same events).
        if ahead is not None and not (
            main
            and (ahead.prev_tick, ahead.tick) == (batch.prev_tick_id, batch.tick_id)
            and ahead.batch_sql == batch_sql
            and ahead.routes == routes
            and ahead.seqs == seqs
        ):
            log.debug("batch %s: what was read ahead is not this batch's", batch.batch_id)
            ahead = None
        started = ahead is not None and ahead.reads
        if main and not started:
            self.ahead.drop_reads()
        estimate = None
        if batch.event_seq is not None and batch.prev_event_seq is not None:
            estimate = batch.event_seq - batch.prev_event_seq
        # One read of the batch says what it holds, queued scripts included.
        summary_at = time.monotonic()
        small = small_batch.may_qualify(
            main, estimate, self.settings.read_ahead_events, node, routes
        )
        prepared = self._prepared(provider, batch, estimate)
        arrays: small_batch.Arrays = {}
        inputs: PlanInputs | None = None
        if ahead is not None:
            log.debug("batch %s: read ahead (its tables too: %s)", batch.batch_id, started)
            summary = ahead.summary
        elif small:  # the tables' reads in the summary's message
            inputs = self._plan_inputs(provider, local, routes)
            summary, arrays = small_batch.summarize_with_reads(
                provider, batch_sql, routes, seqs, inputs, estimate, self._recent, prepared
            )
        else:
            # Nothing of this batch runs beside its summary: its reads wait for it.
            summary = summarize(
                provider, batch_sql, routes, seqs, Segment(),
                scripts=main, removals=main, alone_events=estimate, prepared=prepared,
            )  # fmt: skip
        summary_seconds = time.monotonic() - summary_at
        scripts = read_scripts(provider, batch_sql) if main and count_scripts(summary) else []
        removals = read_removals(provider, batch_sql) if main and count_removals(summary) else []
        facts = strategy.BatchFacts(
            main, estimate, bool(scripts), bool(removals),
            any(r.applies for r in routes.values()), small, self.second.maybe_left,
            bool(read_next),
        )  # fmt: skip
        how = strategy.choose(facts, self.settings, lambda: self.spark.ready(start=False))
        use_spark = how.use_spark
        reading = Reading(
            queue, batch.batch_id, batch.tick_id, batch.tick_time, batch_sql, list(seqs),
            use_spark, how.read_ahead, started, how.apart, consumer,
        )  # fmt: skip
        start_next = None
        if how.start_next:
            # how.start_next holds only when read_next is set (a count of events).
            start_next = partial(self._start_prefetch, provider, local, reading, consumer,
                                 routes, cast(int, read_next))  # fmt: skip
        if local.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            # Else the block below would be a savepoint, and its end no commit of the tick.
            raise ReplayError("the node's connection is in a transaction before the batch")
        if how.small:
            if inputs is None:  # read ahead: the summary came without reads
                inputs = self._plan_inputs(provider, local, routes)
            plan = segment_plan(
                provider, reading, routes, Segment(), summary, inputs, shapes=self.shapes
            )
            done_small = small_batch.apply_or_none(
                local, provider, self.stages, plan, batch_sql, batch=batch, node=node,
                arrays=arrays, prepared=prepared,
            )  # fmt: skip
            if done_small is not None:  # else applied table by table below
                done_small.summary_seconds = summary_seconds
                self._recent = frozenset(done_small.tables) or self._recent
                return done_small
        with local.transaction():
            self.stages.new_transaction()  # committed durably: see WorkerConnections
            if main:  # a pause or move now waits for this batch (a lake commit and its tick)
                model.hold_position(local, queue, consumer, batch.prev_tick_id,
                                    node.provider_node)  # fmt: skip
            staged_at = time.monotonic()
            stats, done = ApplyStats(), frozenset[str]()
            if main:  # tables applied by a second transaction before a failure or stop
                done, stats = self.second.already_applied(local, queue, consumer, batch.tick_id)
            after = None
            for number, script in enumerate([*scripts, None]):
                upto = script.ev_id if script else None
                segment_summary = None if scripts else summary
                stats.add(
                    self._apply_segment(
                        local,
                        provider,
                        reading,
                        routes,
                        Segment(after, upto),
                        segment_summary,
                        later_changes([s.sql for s in scripts[number:]], set(routes)),
                        start_next,
                        done,
                    )
                )
                if script:
                    script_replay.run_script(local, node, batch, script, routes, seqs)
                    # The script may change tables: rows after it use the new shapes.
                    routes = load_routes(local, queue, self.handlers)
                    self._routes.clear()
                    self.forget_shapes()
                after = upto
            # Removals come after every row of the batch, not as barriers in ev_id order:
            # dropping the source's capture triggers waits for every writer of the table,
            # so all its events sit in this batch or an earlier one; a branch's own removal
            # takes its ev_id from the branch's sequence (it can be lower than forwarded
            # events before it); and the batch stays one segment (one summary).
            stale_consumers = []
            if removals:
                stale_consumers = removals_.apply_removals(local, node, removals)
                self._routes.clear()  # the next batch reads the registry again
                self.forget_shapes()
            stats.apply_seconds = time.monotonic() - staged_at
            # Rows this batch found missing here (changed behind replication's back); a
            # chunked copy's catch-up meets such rows by design (docs/replication.md).
            if catchup is None or not catchup.chunked:
                record_divergence(local, queue, consumer, stats, tick_id=batch.tick_id)
            if catchup is not None:
                handover.record_catchup(local, queue, catchup, batch.tick_id)
            else:
                if node.node_type == "branch":
                    forward.forward_events(local, provider, queue, batch_sql, routes)
                if any(r.copy_snapshot for r in routes.values()):  # else nothing to clear
                    handover.clear_snapshots(local, queue, batch.tick_snapshot)
                model.record_tick(local, queue, consumer, batch.tick_id, batch.tick_time,
                                  batch.prev_tick_id, node.provider_node,
                                  tables=sorted(stats.tables))  # fmt: skip
                if self.second.maybe_left:
                    self.second.forget(local, queue, consumer)
            if scripts:  # only a script can leave a failed event behind
                skip.clear_failure(local, queue, consumer)
            commit_at = time.monotonic()
        stats.commit_seconds = time.monotonic() - commit_at
        if main:
            self.second.maybe_left = False
        # After the commit: a consumer dropped before it would be missing if it rolled back.
        # One left by a crash here is dropped when the next worker starts its copies.
        for consumer_name in stale_consumers:
            handover.drop_consumer(provider, queue, consumer_name)
        stats.summary_seconds = summary_seconds
        stats.spark = use_spark
        return stats

    def _plan_inputs(
        self, provider: psycopg.Connection, local: psycopg.Connection, routes: dict[str, Route]
    ) -> PlanInputs:
        return plan_inputs(self.shapes, self.settings, provider, local, routes)

    def _apply_segment(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        reading: Reading,
        routes: dict[str, Route],
        segment: Segment,
        summary: list[SummaryRow] | None,
        later: LaterChanges | None = None,
        start_next: Callable[[], None] | None = None,
        done: frozenset[str] = frozenset(),
    ) -> ApplyStats:
        batch_sql, use_spark = reading.batch_sql, reading.use_spark
        # The provider's catalog already shows what scripts later in the batch change.
        if later is not None:
            routes = later.provider_routes(routes)
        active = [r for r in routes.values() if r.applies]
        read_ahead = reading.read_ahead or use_spark
        inputs = self._plan_inputs(provider, local, routes)
        plan = segment_plan(
            provider, reading, routes, segment, summary, inputs, later, shapes=self.shapes
        )
        plan.tables = [w for w in plan.tables if w.table_name not in done]
        readers = None
        if use_spark and plan.tables:
            readers = self.spark.readers(
                reading.batch_id, self.provider_dsn, self.settings.read_parts
            )
        elif read_ahead and len(plan.tables) > 1:
            # Reads started ahead are taken when the plan asks for the same queries.
            readers = self._reader_pool()
            if reading.started and self.ahead.pool is not None:
                readers = self.ahead.pool
        if reading.started and readers is not self.ahead.pool:
            self.ahead.drop_reads()
        if start_next is not None:
            if readers is not None and readers is self._readers:
                # Started here (apply_segment takes them: the same queries), so that the
                # next batch's reads wait for these.
                readers.start_ahead(
                    [(w.table_name, w.query(batch_sql, segment), w.binary) for w in plan.tables]
                )
            start_next()  # the next batch is read while this one is applied
        at: _TickAt = {
            "queue": reading.queue, "tick_id": reading.tick_id, "tick_time": reading.tick_time
        }  # fmt: skip
        if reading.apart and isinstance(readers, ReaderPool) and self.second.available(local):
            apart = share_out(plan.tables, self.second.eligible(local, active))
            if apart:
                return apply_segment_apart(local, self.stages, plan, batch_sql, segment,
                                           self.second, apart, readers, consumer=reading.consumer,
                                           **at)  # fmt: skip
        return apply_segment(local, self.stages, plan, batch_sql, segment, provider=provider,
                             readers=readers, **at)  # fmt: skip
