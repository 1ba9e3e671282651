"""The replication worker: one loop per node, run by ``pgferry CONFIG.ini worker``.

Root: heartbeat and sequence publishing; nothing is read from any queue.
Branch / leaf: take the next batch from the provider's queue, apply it in one local
transaction that also records the batch's tick (:mod:`.replay.batch`), commit, and only then
finish the batch on the provider: the node's own tick is the truth.  A batch whose tick is already
recorded was applied before a crash: it is finished without applying it again; a batch
that does not start at the node's tick makes the provider's position follow the node's.
A branch also forwards every event into its own queue in the same transaction and mirrors
the provider's tick after the commit.

Tables waiting for their initial copy are copied beside the loop (:mod:`.copies`,
:mod:`.handover`): each copied group replays its own consumer's batches until it meets the
main stream.  This module is the loop itself: which step a node takes, the main stream's
batch, heartbeats and the idle wait.  Its settings are :mod:`.worker_settings`, its
connections and the node's lock :mod:`.connections`, what it does for a pending compare
:mod:`pgferry.sync.serve`, checking and moving positions :mod:`.positions`, the apply of one
batch :mod:`.replay.batch`, the Spark session :mod:`.replay.spark_session`, what it does while idle
:mod:`.idle`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import psycopg

from pgferry.apply import (
    forward,
    idle,
    loop_state,
    positions,
    publish_seqs,
    reconcile,
)
from pgferry.apply.connections import WorkerConnections
from pgferry.apply.copies import Copies
from pgferry.apply.lake_bound import WHOLE, LakeBound
from pgferry.apply.loop_state import LoopReads
from pgferry.apply.replay.batch import Replayer
from pgferry.apply.replay.one_connection import ApplyStats, log_batch
from pgferry.apply.replay.spark_session import WorkerSpark
from pgferry.apply.worker_settings import WorkerSettings
from pgferry.config import Config
from pgferry.daemon import Service, exc_message
from pgferry.db import connect, error_text
from pgferry.errors import DatabaseError, DivergedProvider
from pgferry.handlers import registry as handler_registry
from pgferry.node import model, ticker_health, watermarks
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import Batch
from pgferry.registry.routes import Route
from pgferry.scripts import skip
from pgferry.sync import serve

log = logging.getLogger(__name__)

FORGET_EVERY = 300.0  # seconds between prunings of ferry_node.applied_tick


class Worker(Service):
    """The node's worker loop; see the module docstring."""

    def __init__(
        self,
        config: Config,
        verbose: int = 0,
        overrides: dict[str, str] | None = None,
        *,
        warm_spark: bool = False,
        reposition: str | None = None,
    ) -> None:
        """``warm_spark``: the worker process may start Spark once caught up (the daemon
        does; library users and tests that share one process get it only on demand).
        ``reposition``: "rewind" or "reset" the provider's position once the node's lock
        is held (see :func:`positions.reposition`)."""
        super().__init__()
        self._reposition = reposition
        self.may_warm_spark = warm_spark
        self.config = config
        self.overrides = dict(overrides or {})
        self.verbose = verbose
        self.settings = WorkerSettings.from_config(config)
        self._idle = idle.IdleWatch(self.settings.watermark_period)
        self._forgotten_at = time.monotonic()  # applied ticks' records last pruned
        self._lake_bound = LakeBound(config)  # a lake table ahead of the node (lake_bound.py)
        # The root's ticker, seen from the root or a node reading from it (metrics read it).
        self.ticker_watch = ticker_health.StallLog(ticker_health.stopped_after(config))
        self._ticker_on: str | None = None  # where to look: "local", "provider" or nowhere
        self._spark = WorkerSpark(config, verbose)
        # The handlers' config and what they keep between batches: this worker's only.
        self.handlers = handler_registry.context(config)
        self.replay = Replayer(self.settings.replay, self._spark, self.handlers)
        self.conns = WorkerConnections(config, self.settings, self.replay)
        # Copies running beside the loop, handed what of the worker they use.
        self._copies = Copies(
            config, self.settings, self.conns, self.replay, self._spark, self.count_applied
        )
        self._use_settings()
        self._loop_at = 0.0  # when the last loop started (a root's pace)
        self._orphan_logged = False
        self._node_seen_on: psycopg.Connection | None = None  # require_node passed there
        self.holder = serve.SnapshotHolder()  # snapshot posted for compare / repair
        # What metrics and tests read: counts since start, and callbacks per applied batch.
        self.batches_applied = 0
        self.spark_batches = 0
        self.events_applied = 0  # row events (upserts and deletes after collapsing)
        self.errors_total = 0
        self.batch_observers: list[Callable[[Batch, ApplyStats, float], None]] = []

    def _use_settings(self) -> None:
        handler_registry.reconfigure(self.handlers, self.config)
        self.loop_delay = self.settings.loop_delay
        self.exception_sleep = self.settings.exception_sleep
        self._idle.watermark_period = self.settings.watermark_period
        self.ticker_watch.after = ticker_health.stopped_after(self.config)
        self._spark.config = self.config
        self.replay.settings = self.settings.replay
        self.conns.config, self.conns.settings = self.config, self.settings
        self._copies.config, self._copies.settings = self.config, self.settings

    # --- Service hooks -------------------------------------------------------------------
    def reload(self) -> None:
        from pgferry.config import load_config

        self.config = load_config(self.config.path, (self.config.section,), self.overrides)
        self.settings = WorkerSettings.from_config(self.config)
        self._use_settings()
        self.conns.close()

    def cancel_copies(self) -> None:
        """Stop the copies running beside the loop; their tables stay ``in-copy`` and are
        copied again by the next loop (of this worker or the next one)."""
        self._copies.cancel()

    def copies_running(self) -> int:
        """Tables being copied beside the loop right now."""
        return self._copies.running_tables()

    def shutdown(self) -> None:
        self.cancel_copies()
        self.holder.release()
        self.conns.close()
        self._spark.stop()

    def on_error(self, exc: BaseException) -> None:
        self.errors_total += 1
        self._idle.failed()
        self._lake_bound.failed()
        self.conns.close()
        message = exc_message(exc)
        with connect(self.settings.local_dsn, autocommit=True, connect_timeout=5) as conn:
            node = model.worker_node(conn, self.settings.queue)
            model.record_error(conn, self.settings.queue, node.consumer_name, message)
            if isinstance(exc, skip.EventFailed):
                skip.record_failure(conn, exc.event)

    def work(self) -> bool:
        try:
            return self._work()
        except psycopg.Error as exc:
            # One line for the log and status; the connection is reopened next loop.  A
            # broken provider connection (a stalled network) is named: the error is not.
            where, text = self.conns.lost_provider(), error_text(exc)
            raise DatabaseError(f"provider {where}: {text}" if where else text) from None

    # --- one worker per node ------------------------------------------------------------
    def claim(self) -> None:
        """Hold the node's lock (see :func:`model.lock_node`) for as long as we run."""
        if self.conns.take_lock() and self._reposition:
            positions.reposition(self.config, reset=self._reposition == "reset")
            self._reposition = None

    # --- the loop ------------------------------------------------------------------------
    def _work(self) -> bool:
        self.claim()  # again after a lost connection: another worker may have started
        self._spark.idle()  # an unused session goes (spark_idle_timeout)
        local = self.conns.to_local()
        lock = self.conns.lock
        assert lock is not None  # autocommit, on the node: the idle reads
        self._loop_at = time.monotonic()
        copying = self._copies.running_tables() > 0
        # The root's queue (see _whole_loop): the root's own, or the provider's (read as
        # the root's only when it ticks itself).
        on = {"local": lock, "provider": self.conns.provider}.get(self._ticker_on or "")
        self.ticker_watch.look(on, self.settings.queue)
        if self._idle.quiet(lock, self.conns.provider, self.settings.queue, copying=copying):
            return False
        more = self._whole_loop(local, lock)
        self._idle.loop_done(more)
        return more

    def _whole_loop(self, local: psycopg.Connection, lock: psycopg.Connection) -> bool:
        if local is not self._node_seen_on:  # is the schema there: once per connection
            with local.transaction():
                model.require_node(local, self.settings.queue)
            self._node_seen_on = local
        # On the autocommit connection: one statement, no transaction to open and commit.
        node, reads = loop_state.read_loop(lock, self.settings.queue)
        # Whom the next idle loops look for on the provider (nobody: nothing to take).
        self._idle.consumer = (
            node.consumer_name
            if node.node_type != "root" and node.provider_location and not node.paused
            else None
        )
        self._ticker_on = (
            "local" if node.node_type == "root" else "provider" if self._idle.consumer else None
        )
        if node.node_type != "root" and node.provider_location is None:
            # A node without a provider (an old root after resurrect) waits for
            # change-provider; nothing to apply until then.
            if not self._orphan_logged:
                log.info("Node %s has no provider: waiting for change-provider", node.node_name)
                self._orphan_logged = True
            self._heartbeat(local, node.queue_name, node.consumer_name)
            return False
        self._orphan_logged = False
        if node.node_type == "root":
            return self._root_step(local, node)
        if node.paused:
            self._heartbeat(local, node.queue_name, node.consumer_name)
            return False
        return self._subscriber_step(local, node, reads)

    def _root_step(self, local: psycopg.Connection, node: model.NodeInfo) -> bool:
        self.conns.listen_root()  # ticks of its own queue wake an idle root (see sleep)
        self._publish_watermark(local, None, node)
        with local.transaction():
            sent = publish_seqs.publish(local, node.queue_name, self.settings.seq_buffer)
        self._heartbeat(local, node.queue_name, node.consumer_name)
        if sent:
            log.debug("published %d sequence values", sent)
        return False

    def _subscriber_step(
        self, local: psycopg.Connection, node: model.NodeInfo, reads: LoopReads
    ) -> bool:
        assert node.provider_location is not None
        routes = self.replay.routes(local, node.queue_name, reads.signature)
        seqs, request = reads.seqs, reads.request
        self.conns.set_replica_role(local)
        provider = self.conns.to_provider(node.provider_location)
        queue, consumer = node.queue_name, node.consumer_name
        self._publish_watermark(local, provider, node)
        stop, request = serve.before_batch(
            local, self.holder, request, node.last_tick_id, self.settings.local_dsn, queue,
            consumer,
        )  # fmt: skip
        if stop is not None:
            return stop

        caught_up: bool | None = False
        hold_at: int | None = None
        if self._copies.to_look_at(reads.tables_settled):
            self._copies.start_pending(local, node, self.conns.provider_dsn or "")
            caught_up, hold_at = self._copies.catch_up(local, provider, node, routes)
        if caught_up is None:
            return True  # a group joined the main stream: the routes change
        main = self._main_step(local, provider, node, routes, seqs, request, hold_at)
        return main or caught_up

    def _main_step(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        node: model.NodeInfo,
        routes: dict[str, Route],
        seqs: list[str],
        request: serve.Request | None,
        hold_at: int | None,
    ) -> bool:
        """The node's own stream: the next batch of the provider's queue."""
        queue, consumer = node.queue_name, node.consumer_name
        # One tick per batch while compare waits for a tick or a copied group waits for
        # the main stream at its tick: the worker must stop exactly there.
        one_tick = request is not None or hold_at is not None
        # Batches taken by their size alone (no delay, no minimum span): the next one is
        # read ahead (prefetch.py asks the queue for its tick by the same rule).
        plain = not one_tick and not self.settings.keep_lag and not self.settings.collect_interval
        read_next = self.settings.batch_min_events if plain else None
        batch_id, ahead, waiting, batch = None, None, 0, None
        try:
            upto = self._lake_bound.upto(local, provider, queue, node.last_tick_id)
        except DivergedProvider as exc:
            # A lake table holds a tick past the node's that the provider made at another
            # time: reconciled like the node's own (the lake table is copied again).
            return self._reconcile(local, provider, node, exc)
        if upto == LakeBound.WAIT:
            self._heartbeat(local, queue, consumer)
            return False
        if upto is not None:  # a lake table holds that tick: the batch ends there
            self.replay.ahead.drop()
            read_next = None
            batch_id = queue_batches.next_batch_upto(provider, queue, consumer, upto, WHOLE)
            if batch_id is None:
                # The provider's position of this consumer is past that tick: the node's
                # own fell back (its database failed over to a lagging standby).  A batch
                # from there, which follows() answers by moving the provider back.
                batch_id = queue_batches.next_batch(provider, queue, consumer, min_count=None)
        elif read_next:
            batch_id, ahead = self.replay.ahead.take(provider, queue, consumer, node.last_tick_id)
        else:
            self.replay.ahead.drop()
        if batch_id is None and upto is None:
            rule = queue_batches.BatchRule(
                most=self.settings.batch_min_events,
                min_lag=self.settings.keep_lag,
                min_interval=self.settings.collect_interval,
                one_tick=one_tick,
            )
            batch, waiting = queue_batches.take_batch(provider, queue, consumer, rule, flush=False)
            batch_id = batch.batch_id if batch else None
            if not plain:
                waiting = 0  # the next loop at once: a copy or a compare may wait on it
        if batch_id is None:
            self._heartbeat(local, queue, consumer)
            if self.may_warm_spark and self.settings.warm_spark:
                # Caught up: a good moment to start Spark for the next copy or large batch,
                # rather than during a catch-up, where its start would compete for the CPU.
                self._spark.ready()
            return False
        if batch is None:
            batch = queue_batches.batch_info(provider, batch_id, event_sql=True)
        mirror = None
        if node.node_type == "branch":  # a branch makes the provider's tick in its queue

            def mirror() -> None:
                forward.ensure_tick(local, queue, batch)

        try:
            follows = positions.follows(
                provider, queue, consumer, node.last_tick_id, batch,
                recorded_time=node.last_tick_time, already_applied=mirror,
            )  # fmt: skip
        except DivergedProvider as exc:
            return self._reconcile(local, provider, node, exc)
        if not follows:
            self.replay.ahead.drop_reads()
            return True

        started = time.monotonic()
        stats = self.replay.apply(
            local, provider, node, batch, routes, seqs, ahead=ahead, read_next=read_next
        )
        if mirror is not None:
            mirror()
        # The finish, like the batch's opening, commits without waiting for the provider's
        # WAL flush: this node's recorded tick is the truth (queue/batches.py says why).
        if waiting == 1:
            # The batch took the only tick waiting: the ticker, woken with the finish, ticks
            # at once if events wait, and the tick's notification starts the next loop.
            queue_batches.finish_batch_and_wake(provider, batch_id, flush=False)
        else:
            queue_batches.finish_batch(provider, batch_id, flush=False)
        self.count_applied(batch, stats, started, "")
        self._forget_applied(local, queue, consumer)
        self._idle.heartbeat_done()  # the batch's tick record wrote last_seen
        serve.after_batch(
            local, self.holder, request, batch, self.settings.local_dsn, queue, consumer
        )
        return waiting != 1

    def _reconcile(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        node: model.NodeInfo,
        diverged: DivergedProvider,
    ) -> bool:
        """The provider lost ticks applied here (docs/failover.md): reconcile, or stop on
        ``diverged`` (failover_reconcile = stop: the DBA looks first)."""
        self.replay.ahead.drop()
        if not self.settings.failover_reconcile:
            raise diverged
        reconcile.reconcile(local, provider, node, self.config)
        # Its tables' copies change the routes; the lake tables' ticks are looked at again.
        self._lake_bound.failed()
        return True

    def count_applied(self, batch: Batch, stats: ApplyStats, started: float, what: str) -> None:
        """Count a batch applied (main stream or a copied group's) for metrics and tests,
        and log it."""
        seconds = time.monotonic() - started
        self.batches_applied += 1
        self.spark_batches += stats.spark
        self.events_applied += stats.upserts + stats.deletes
        # The watermark moves with the position, whether or not an event was for this node:
        # a batch that carried any event of the provider's queue is reported after
        # watermark_period, or a quiet node (a partial leaf) would hold the provider's
        # rotation back for WATERMARK_REFRESH.  Idle ticks carry none: no report is due.
        carried = (batch.event_seq or 0) > (batch.prev_event_seq or 0)
        if carried or stats.upserts or stats.deletes or stats.truncates:
            self._idle.events_applied()
        for observe in self.batch_observers:
            observe(batch, stats, seconds)
        log_batch(batch, stats, seconds, what)

    def _publish_watermark(
        self, local: psycopg.Connection, provider: psycopg.Connection | None, node: model.NodeInfo
    ) -> None:
        """Tell the provider what this node's subtree still needs (see node/watermarks.py),
        when :meth:`IdleWatch.watermark_due` says so."""
        if self._idle.watermark_due():
            watermarks.publish(local, provider, node.queue_name, node.node_name, config=self.config)

    def sleep(self, seconds: float) -> None:
        """Idle until the provider's next tick (a batch to take), a signal or ``seconds``.

        A root waits on its own database for its queue's ticks instead: ``seconds`` doubled
        per quiet loop (up to ``idle.ROOT_BACKOFF`` times), a tick ending the wait no sooner
        than ``seconds`` after the last loop started.
        """
        root = self.conns.root_listens and self._idle.consumer is None
        conn = self.conns.lock if root else self.conns.provider
        if conn is None or conn.closed:
            super().sleep(seconds)
            return

        def on_tick(deadline: float) -> float | None:
            if not root:
                self._idle.tick_heard = True
                return None  # a batch to take
            self._idle.quiet_loops = 0
            return min(deadline, self._loop_at + seconds)

        wait = self._idle.root_wait(seconds) if root else seconds
        try:
            idle.wait_for_ticks(
                conn,
                self.settings.queue,
                time.monotonic() + wait,
                on_tick,
                self.wait_readable,
                lambda: self.stopping or self._reload_requested,
            )
        except psycopg.Error as exc:
            self._idle.failed()  # the connection broke: the next loop reconnects
            where = "node" if root else f"provider {self.conns.lost_provider() or ''}".rstrip()
            log.warning("%s: %s (while waiting for a tick): connecting again", where,
                        error_text(exc))  # fmt: skip

    def _heartbeat(self, local: psycopg.Connection, queue: str, consumer: str) -> None:
        """At most one write per ``idle.HEARTBEAT_EVERY`` seconds while idle."""
        if self._idle.heartbeat_due():
            with local.transaction():
                model.heartbeat(local, queue, consumer)
            self._idle.heartbeat_done()
        self._forget_applied(local, queue, consumer)

    def _forget_applied(self, local: psycopg.Connection, queue: str, consumer: str) -> None:
        """Drop the applied ticks' records past failover_history, every FORGET_EVERY s."""
        if time.monotonic() - self._forgotten_at < FORGET_EVERY:
            return
        with local.transaction():
            model.forget_applied(local, queue, consumer, self.settings.failover_history)
        self._forgotten_at = time.monotonic()
