"""The replay of one batch, stage after stage, and what the worker keeps between batches.

A batch runs one way through its stages, each a module of its own:

1. its summary, read on the provider (:mod:`.summary`): what the batch holds, queued
   scripts and removals included;
2. the strategy chosen from it (:mod:`.strategy`): a small batch in two round trips
   (:mod:`.small_batch`), else read inline, by reader threads or by Spark tasks, with a
   second subscriber connection or not;
3. ONE subscriber transaction, committed durably (:class:`~.batch_end.BatchTransaction`,
   the node's position held from its start): the segments between queued scripts in
   ev_id order (:mod:`.segments`), each script at its place (:mod:`.script_replay`);
4. the batch's end in that transaction (:meth:`~.batch_end.BatchTransaction.end_batch`):
   the removals, the forwarding, the divergence, the batch's tick recorded (the tick and
   the rows commit together: that is what makes the apply exactly-once).

:class:`Replayer` keeps, between batches, the registry's routes, what was learnt of the
tables' shapes, the stage tables, the reader connections and the next batch being read
ahead (:mod:`.prefetch`: its summary and reads replace this batch's when it is this one).
"""

from __future__ import annotations

import logging
import time

import psycopg

from pgferry.apply import handover
from pgferry.apply.replay import script_replay, strategy
from pgferry.apply.replay.batch_end import BatchTransaction
from pgferry.apply.replay.batch_sql import Segment
from pgferry.apply.replay.one_connection import ApplyStats
from pgferry.apply.replay.prefetch import Ahead, Prefetcher
from pgferry.apply.replay.read import ReplayError
from pgferry.apply.replay.script_shapes import later_changes
from pgferry.apply.replay.segments import Segments
from pgferry.apply.replay.shapes import TableShapes, plan_inputs
from pgferry.apply.replay.small_batch import SmallBatch
from pgferry.apply.replay.spark_session import WorkerSpark
from pgferry.apply.replay.stage_tables import StageTables
from pgferry.apply.replay.summary import read_summary, summarize
from pgferry.apply.replay.two_connections import SecondApply
from pgferry.apply.replay.ways import Reading, Ways
from pgferry.apply.routes import RouteCache
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.handlers.api import HandlerContext
from pgferry.node import model
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import Batch
from pgferry.registry import copystate
from pgferry.registry.routes import Route, load_routes

log = logging.getLogger(__name__)


class Replayer:
    """Applies the worker's batches; see the module docstring."""

    def __init__(
        self, settings: ReplaySettings, spark: WorkerSpark, handlers: HandlerContext
    ) -> None:
        self.settings = settings  # replaced on reload
        self.spark = spark
        self.handlers = handlers  # the worker's: the tables' handlers are built with it
        self.shapes = TableShapes()
        self.stages = StageTables()
        self.second = SecondApply()  # a large batch's second connection to the node
        self.ahead = Prefetcher()  # the next batch, read while this one is applied
        self.ways = Ways(spark, self.shapes, self.stages, self.second, self.ahead)
        self.segments = Segments(self.shapes, self.ways)
        self._routes = RouteCache(handlers)
        self._recent: frozenset[str] | None = None  # the tables of the last small batch

    # --- state kept between batches ------------------------------------------------------
    @property
    def provider_dsn(self) -> str:
        return self.ways.provider_dsn

    def use_provider(self, dsn: str) -> None:
        """A new provider connection: what it has may differ."""
        self.ways.provider_dsn = dsn
        self.forget_shapes()
        self.close_readers()

    def forget_shapes(self) -> None:
        """Drop what was learnt of the tables' shapes on both sides (they may have changed)."""
        self.shapes.forget()
        self.stages.reset()
        self.second.forget_tables()

    def close_readers(self) -> None:
        self.ways.close_readers()

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
        settings = self.settings
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
        if ahead is not None:
            log.debug("batch %s: read ahead (its tables too: %s)", batch.batch_id, started)
        estimate = None
        if batch.event_seq is not None and batch.prev_event_seq is not None:
            estimate = batch.event_seq - batch.prev_event_seq
        # 1. One read of the batch says what it holds, queued scripts included.
        small = strategy.may_be_small(main, estimate, settings.read_ahead_events, node, routes)
        summary = read_summary(
            provider,
            local,
            batch,
            batch_sql,
            routes,
            seqs,
            main=main,
            small=small,
            estimate=estimate,
            ahead=ahead.summary if ahead is not None else None,
            settings=settings,
            table_shapes=self.shapes,
            recent=self._recent,
        )
        scripts, removals = summary.scripts, summary.removals
        # 2. How it is applied.
        facts = strategy.BatchFacts(
            main, estimate, bool(scripts), bool(removals),
            any(r.applies for r in routes.values()), small, self.second.maybe_left,
            bool(read_next),
        )  # fmt: skip
        how = strategy.choose(facts, settings, lambda: self.spark.ready(start=False))
        reading = Reading(
            queue=node.queue_name,
            batch_id=batch.batch_id,
            tick_id=batch.tick_id,
            tick_time=batch.tick_time,
            batch_sql=batch_sql,
            seqs=list(seqs),
            how=how,
            started=started,
            consumer=node.consumer_name,
            read_next=read_next if how.start_next else None,
        )
        if local.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            # Else the block below would be a savepoint, and its end no commit of the tick.
            raise ReplayError("the node's connection is in a transaction before the batch")
        if how.small:
            inputs = plan_inputs(
                self.shapes,
                settings,
                provider,
                local,
                routes,
                summary=summary.rows,
                batch_sql=batch_sql,
            )
            plan = inputs.plan(
                summary.rows,
                routes,
                reading.seqs,
                ranges=how.ranges,
                whole_updates=how.whole_updates,
            )
            whole = SmallBatch(
                provider,
                self.stages,
                batch,
                node,
                arrays=summary.arrays,
                prepared=summary.prepared,
            )
            done_small = whole.apply(local, plan, whole.read(plan, batch_sql))
            if done_small is not None:  # else applied table by table below
                done_small.summary_seconds = summary.seconds
                self._recent = frozenset(done_small.tables) or self._recent
                return done_small
        # 3. One transaction: the segments and scripts, 4. then the batch's end.
        with BatchTransaction(local, self.stages, node, batch, catchup) as tx:
            staged_at = time.monotonic()  # the batch is held: its apply starts
            stats, done = ApplyStats(), frozenset[str]()
            if main:  # tables applied by a second transaction before a failure or stop
                done, stats = self.second.already_applied(
                    local, node.queue_name, node.consumer_name, batch.tick_id
                )
            after = None
            for number, script in enumerate([*scripts, None]):
                upto = script.ev_id if script else None
                segment = Segment(after, upto)
                rows = summary.rows
                if scripts:  # each segment between scripts has a summary of its own
                    rows = summarize(provider, batch_sql, routes, reading.seqs, segment)
                later = later_changes([s.sql for s in scripts[number:]], set(routes))
                stats.add(
                    self.segments.replay(
                        settings, local, provider, reading, routes, segment, rows, later, done
                    )
                )
                if script:
                    script_replay.run_script(local, node, batch, script, routes, seqs)
                    # The script may change tables: rows after it use the new shapes.
                    routes = load_routes(local, node.queue_name, self.handlers)
                    self._routes.clear()
                    self.forget_shapes()
                after = upto
            stale_consumers = tx.end_batch(
                provider,
                batch_sql,
                routes,
                stats,
                removals,
                self.second,
                scripts=bool(scripts),
                staged_at=staged_at,
            )
            if removals:
                self._routes.clear()  # the next batch reads the registry again
                self.forget_shapes()
        stats.commit_seconds = tx.commit_seconds
        if main:
            self.second.maybe_left = False
        # After the commit: a consumer dropped before it would be missing if it rolled back.
        # One left by a crash here is dropped when the next worker starts its copies.
        for consumer_name in stale_consumers:
            handover.drop_consumer(provider, node.queue_name, consumer_name)
        stats.summary_seconds = summary.seconds
        stats.spark = how.spark
        return stats
