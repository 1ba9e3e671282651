"""The replication worker: one loop per node, run by ``pgferry CONFIG.ini worker``.

Root: heartbeat and sequence publishing; nothing is read from any queue.
Branch / leaf: take the next batch from the provider's queue, apply it in one local
transaction that also records the batch's tick (:mod:`.batch`), commit, and only then
finish the batch on the provider: the node's own tick is the truth.  A batch whose tick is already
recorded was applied before a crash: it is finished without applying it again; a batch
that does not start at the node's tick makes the provider's position follow the node's.
A branch also forwards every event into its own queue in the same transaction and mirrors
the provider's tick after the commit.

Tables waiting for their initial copy are copied beside the loop (:mod:`.copies`,
:mod:`.handover`): each copied group replays its own consumer's batches until it meets the
main stream.  This module keeps the loop, its connections and the node's lock; checking
and moving positions is :mod:`.positions`, the Spark session :mod:`.spark_session`.  It is
over 400 lines because the loop's steps share its connections and per-batch state; each
step that could stand alone (positions, copies, replay, snapshots for compare) already does.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import psycopg

from pgferry.apply import forward, idle, positions, publish_seqs, sync
from pgferry.apply.batch import Replayer, ReplaySettings
from pgferry.apply.copies import Copies
from pgferry.apply.read import set_text_format
from pgferry.apply.routes import Route
from pgferry.apply.spark_session import WorkerSpark
from pgferry.apply.stage_apply import ApplyStats
from pgferry.config import Config
from pgferry.daemon import Service, exc_message
from pgferry.db import connect, error_text
from pgferry.errors import DatabaseError
from pgferry.handlers import registry as handler_registry
from pgferry.node import model, seqops, watermarks
from pgferry.node.connect import local_connstr, queue_name, remote_connstr
from pgferry.queue import api as queue_api
from pgferry.queue import ticks as queue_ticks
from pgferry.queue.api import Batch
from pgferry.scripts import skip

log = logging.getLogger(__name__)

# Seconds between watermark reports up the cascade (watermark_period): rotation on a
# provider runs every few minutes at most, so a report every few seconds keeps it exact at
# a small cost.
WATERMARK_EVERY = 5.0
# The longest idle wait (the original's default): a tick announced by the provider ends it
# at once, so this bounds how late a change on the node itself is noticed.
LOOP_DELAY = 1.0

REPLICA_REMEDY = (
    "cannot set session_replication_role = replica: {detail}; "
    "connect as a role allowed to set it "
    "(PostgreSQL 15: GRANT SET ON PARAMETER session_replication_role TO <role>)"
)


@dataclass
class WorkerSettings:
    queue: str
    local_dsn: str
    loop_delay: float
    exception_sleep: float
    connection_lifetime: float
    parallel_copies: int
    batch_min_events: int  # a consumer behind asks for multi-tick batches of this size
    warm_spark: bool  # start Spark in the background once caught up
    seq_buffer: int  # a root publishes its sequences this far ahead
    watermark_period: float  # seconds between watermark reports to the provider
    keep_lag: timedelta | None  # pgq_keep_lag: take only batches at least this old
    collect_interval: timedelta | None  # pgq_batch_collect_interval: minimum batch span
    replay: ReplaySettings

    @classmethod
    def from_config(cls, config: Config) -> WorkerSettings:
        return cls(
            queue=queue_name(config),
            local_dsn=local_connstr(config),
            loop_delay=config.getfloat("loop_delay", LOOP_DELAY),
            exception_sleep=config.getfloat("exception_sleep", 20.0),
            connection_lifetime=config.getfloat("connection_lifetime", 1200.0),
            parallel_copies=config.getint("parallel_copies", 1),
            batch_min_events=config.getint(
                "pgq_batch_collect_events", config.getint("replay_batch_events", 200000)
            ),
            warm_spark=config.getbool("spark_warm", True),
            seq_buffer=seqops.seq_buffer(config),
            watermark_period=config.getfloat("watermark_period", WATERMARK_EVERY),
            keep_lag=config.getseconds("pgq_keep_lag"),
            collect_interval=config.getseconds("pgq_batch_collect_interval"),
            replay=ReplaySettings.from_config(config),
        )


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
        self._spark = WorkerSpark(config, verbose)
        self.replay = Replayer(self.settings.replay, self._spark)
        self._use_settings()
        self.local: psycopg.Connection | None = None
        self.provider: psycopg.Connection | None = None
        self.provider_dsn: str | None = None
        self._connected_at = 0.0
        self._replica_conn: psycopg.Connection | None = None
        self._lock_conn: psycopg.Connection | None = None  # holds the node's lock
        self._root_listens = False  # the lock connection hears the root queue's ticks
        self._loop_at = 0.0  # when the last loop started (a root's pace)
        self._orphan_logged = False
        self.holder = sync.SnapshotHolder()  # snapshot posted for compare / repair
        self._copies = Copies(self)  # copies running beside the loop
        # What metrics and tests read: counts since start, and callbacks per applied batch.
        self.batches_applied = 0
        self.spark_batches = 0
        self.events_applied = 0  # row events (upserts and deletes after collapsing)
        self.errors_total = 0
        self.batch_observers: list[Callable[[Batch, ApplyStats, float], None]] = []

    def _use_settings(self) -> None:
        handler_registry.use_config(self.config)
        self.loop_delay = self.settings.loop_delay
        self.exception_sleep = self.settings.exception_sleep
        self._idle.watermark_period = self.settings.watermark_period
        self._spark.config = self.config
        self.replay.settings = self.settings.replay

    # --- Service hooks -------------------------------------------------------------------
    def reload(self) -> None:
        from pgferry.config import load_config

        self.config = load_config(self.config.path, (self.config.section,), self.overrides)
        self.settings = WorkerSettings.from_config(self.config)
        self._use_settings()
        self._disconnect()

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
        self._disconnect()
        self._spark.stop()

    def on_error(self, exc: BaseException) -> None:
        self.errors_total += 1
        self._idle.failed()
        self._disconnect()
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
            # One line for the log and status; the connection is reopened next loop.
            raise DatabaseError(error_text(exc)) from None

    # --- connections ---------------------------------------------------------------------
    def _disconnect(self) -> None:
        for conn in (self.local, self.provider):
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
        self.local = self.provider = None
        if self._lock_conn is not None:
            # Released while we wait to retry: a worker started meanwhile takes the node
            # and this one stops at its next loop, so there is never more than one.
            with contextlib.suppress(Exception):
                self._lock_conn.close()
            self._lock_conn = None
            self._root_listens = False
        self.replay.close()

    def _local(self) -> psycopg.Connection:
        lifetime = self.settings.connection_lifetime
        if (
            self.local is not None
            and lifetime > 0
            and time.monotonic() - self._connected_at > lifetime
        ):
            self._disconnect()
        if self.local is None or self.local.closed:
            conn = connect(self.settings.local_dsn, application_name="pgferry-worker")
            self.local = conn
            self._connected_at = time.monotonic()
        return self.local

    def _provider(self, location: str) -> psycopg.Connection:
        dsn = remote_connstr(self.config, location)
        if self.provider is not None and (self.provider.closed or dsn != self.provider_dsn):
            self.provider.close()
            self.provider = None
        if self.provider is None:
            self.provider = connect(dsn, autocommit=True, application_name="pgferry-worker")
            set_text_format(self.provider)
            queue_ticks.listen_for_ticks(self.provider)
            self.provider_dsn = dsn
            self.replay.use_provider(dsn)
        return self.provider

    def _set_replica_role(self, conn: psycopg.Connection) -> None:
        # Session-wide: local triggers (the deny-write guard, FK checks) stay quiet.
        if self._replica_conn is conn:
            return
        try:
            conn.execute("set session_replication_role = replica")
            conn.commit()
            self._replica_conn = conn
        except psycopg.errors.InsufficientPrivilege as exc:
            conn.close()
            raise DatabaseError(REPLICA_REMEDY.format(detail=error_text(exc))) from None

    # --- one worker per node ------------------------------------------------------------
    def claim(self) -> None:
        """Hold the node's lock (see :func:`model.lock_node`) for as long as we run."""
        if self._lock_conn is not None and not self._lock_conn.closed:
            return
        conn = connect(self.settings.local_dsn, autocommit=True, application_name="pgferry-lock")
        try:
            model.lock_node(conn, self.settings.queue)
        except BaseException:
            conn.close()
            raise
        self._lock_conn = conn
        if self._reposition:
            positions.reposition(self.config, reset=self._reposition == "reset")
            self._reposition = None

    # --- the loop ------------------------------------------------------------------------
    def _work(self) -> bool:
        self.claim()  # again after a lost connection: another worker may have started
        self._spark.idle()  # an unused session goes (spark_idle_timeout)
        local = self._local()
        assert self._lock_conn is not None  # autocommit, on the node: the idle reads
        self._loop_at = time.monotonic()
        copying = self._copies.running_tables() > 0
        if self._idle.quiet(self._lock_conn, self.provider, self.settings.queue, copying=copying):
            return False
        more = self._whole_loop(local)
        self._idle.loop_done(more)
        return more

    def _whole_loop(self, local: psycopg.Connection) -> bool:
        with local.transaction():
            node = model.require_node(local, self.settings.queue)
        # Whom the next idle loops look for on the provider (nobody: nothing to take).
        self._idle.consumer = (
            node.consumer_name
            if node.node_type != "root" and node.provider_location and not node.paused
            else None
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
        return self._subscriber_step(local, node)

    def _root_step(self, local: psycopg.Connection, node: model.NodeInfo) -> bool:
        if not self._root_listens and self._lock_conn is not None:
            # Ticks of its own queue wake an idle root (see sleep).  Only a root listens:
            # nobody would read the notifications on another node's lock connection.
            queue_ticks.listen_for_ticks(self._lock_conn)
            self._root_listens = True
        self._publish_watermark(local, None, node)
        with local.transaction():
            sent = publish_seqs.publish(local, node.queue_name, self.settings.seq_buffer)
        self._heartbeat(local, node.queue_name, node.consumer_name)
        if sent:
            log.debug("published %d sequence values", sent)
        return False

    def _subscriber_step(self, local: psycopg.Connection, node: model.NodeInfo) -> bool:
        assert node.provider_location is not None
        self._set_replica_role(local)
        provider = self._provider(node.provider_location)
        queue, consumer = node.queue_name, node.consumer_name
        with local.transaction():
            routes = self.replay.routes(local, queue)
            seqs = publish_seqs.local_sequences(local, queue)
            request = sync.pending_request(local, queue, consumer)
        self._publish_watermark(local, provider, node)
        self.holder.release_if_done(request)
        if request is not None and request.state == "wait" and not request.tick_id:
            if not request.stale:
                # compare is choosing the tick (on a branch provider, one that exists
                # already): apply nothing meanwhile, or this node could pass it.
                return False
            log.warning("Dropping a compare request left without a tick by a stopped command")
            with local.transaction():
                sync.drop_request(local, queue, consumer)
            request = None
        if request is not None and request.tick_id:
            if request.state == "wait" and node.last_tick_id == request.tick_id:
                self.holder.post(self.settings.local_dsn, queue, consumer)
                return True
            if (
                request.state == "wait"
                and node.last_tick_id is not None
                and node.last_tick_id > request.tick_id
            ):
                with local.transaction():
                    sync.mark_missed(local, queue, consumer)  # compare tries another tick
                return True
            if request.state == "ready" and request.pause:
                return False  # repair --apply works on the data as of that tick

        self._copies.start_pending(local, node, self.provider_dsn or "")
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
        request: sync.Request | None,
        hold_at: int | None,
    ) -> bool:
        """The node's own stream: the next batch of the provider's queue."""
        queue, consumer = node.queue_name, node.consumer_name
        # One tick per batch while compare waits for a tick or a copied group waits for
        # the main stream at its tick: the worker must stop exactly there.
        min_count = None
        one_tick = request is not None or hold_at is not None
        if not one_tick:
            ticks, events = queue_ticks.pending(provider, queue, node.last_tick_id)
            if ticks > 1:
                min_count = max(1, min(events, self.settings.batch_min_events))
        batch_id = positions.take_batch(
            provider,
            queue,
            consumer,
            min_count=min_count,
            one_tick=one_tick,
            keep_lag=self.settings.keep_lag,
            collect_interval=self.settings.collect_interval,
        )
        if batch_id is None:
            self._heartbeat(local, queue, consumer)
            if self.may_warm_spark and self.settings.warm_spark:
                # Caught up: a good moment to start Spark for the next copy or large batch,
                # rather than during a catch-up, where its start would compete for the CPU.
                self._spark.ready()
            return False
        batch = queue_api.batch_info(provider, batch_id)
        mirror = None
        if node.node_type == "branch":  # a branch makes the provider's tick in its queue

            def mirror() -> None:
                forward.ensure_tick(local, queue, batch)

        if not positions.follows(
            provider, queue, consumer, node.last_tick_id, batch, already_applied=mirror
        ):
            return True

        started = time.monotonic()
        stats = self.replay.apply(local, provider, node, batch, routes, seqs)
        if mirror is not None:
            mirror()
        queue_api.finish_batch(provider, batch_id)
        self.count_applied(batch, stats, started, "")
        self._idle.heartbeat_done()  # the batch's tick record wrote last_seen
        if request is not None and request.tick_id and request.state == "wait":
            if batch.tick_id == request.tick_id:
                self.holder.post(self.settings.local_dsn, queue, consumer)
            elif (
                batch.prev_tick_id is not None
                and batch.prev_tick_id < request.tick_id < batch.tick_id
            ):
                with local.transaction():
                    sync.mark_missed(local, queue, consumer)
        return True

    def count_applied(self, batch: Batch, stats: ApplyStats, started: float, what: str) -> None:
        """Count a batch applied (main stream or a copied group's) for metrics and tests,
        and log it."""
        seconds = time.monotonic() - started
        self.batches_applied += 1
        self.spark_batches += stats.spark
        self.events_applied += stats.upserts + stats.deletes
        if stats.upserts or stats.deletes or stats.truncates:
            self._idle.events_applied()
        for observe in self.batch_observers:
            observe(batch, stats, seconds)
        _log_batch(batch, stats, seconds, what)

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
        root = self._root_listens and self._idle.consumer is None
        conn = self._lock_conn if root else self.provider
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
        except psycopg.Error:
            self._idle.failed()  # the connection broke: the next loop reconnects

    def _heartbeat(self, local: psycopg.Connection, queue: str, consumer: str) -> None:
        """At most one write per ``idle.HEARTBEAT_EVERY`` seconds while idle."""
        if self._idle.heartbeat_due():
            with local.transaction():
                model.heartbeat(local, queue, consumer)
            self._idle.heartbeat_done()


def _log_batch(batch: Batch, stats: ApplyStats, seconds: float, what: str) -> None:
    log.debug(
        "batch %s tick %s%s%s: %d upserts, %d deletes, %d truncates in %.3fs"
        " (summary %.3fs, apply %.3fs, commit %.3fs)",
        batch.batch_id,
        batch.tick_id,
        what,
        " (spark)" if stats.spark else "",
        stats.upserts,
        stats.deletes,
        stats.truncates,
        seconds,
        stats.summary_seconds,
        stats.apply_seconds,
        stats.commit_seconds,
    )
