"""The replication worker: one loop per node, run by ``pgferry CONFIG.ini worker``.

Root: heartbeat and sequence publishing; nothing is read from any queue.
Branch / leaf: take the next batch from the provider's queue, replay it into the local
database (:mod:`pgferry.apply.replay`) in one transaction that also records the
batch's tick, commit, and only then finish the batch on the provider (design-notes §2).
A batch whose tick is already recorded was applied before a crash: it is finished without
applying it again.  A branch also forwards every event into its own queue in the same
transaction and mirrors the provider's tick after the commit.

Tables waiting for their initial copy are copied between batches (:mod:`.handover`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass

import psycopg

from pgferry.apply import forward, handover, publish_seqs, replay, sync
from pgferry.apply.batch_sql import Segment
from pgferry.apply.routes import (
    Route,
    load_routes,
    registry_signature,
    source_columns,
    types_present,
)
from pgferry.config import Config
from pgferry.daemon import Service, exc_message
from pgferry.db import connect, error_text
from pgferry.errors import DatabaseError, NodeError, PgferryError, QueueError
from pgferry.node import model
from pgferry.node.connect import local_connstr, queue_name, remote_connstr
from pgferry.queue import api as queue_api
from pgferry.scripts import skip

log = logging.getLogger(__name__)

ROUTES_MAX_AGE = 30.0  # seconds: DDL on the provider shows up in replay at least this soon
HEARTBEAT_EVERY = 1.0  # seconds between heartbeat writes while idle
# Subscribers poll the provider this often when idle: the lag goal is measured in seconds.
SUBSCRIBER_LOOP_DELAY = 0.25

REPLICA_REMEDY = (
    "cannot set session_replication_role = replica: {detail}; "
    "connect as a role allowed to set it "
    "(PostgreSQL 15: GRANT SET ON PARAMETER session_replication_role TO <role>)"
)


@dataclass(frozen=True)
class _Reading:
    """How the segments of one batch are read."""

    batch_id: int
    batch_sql: str
    seqs: list[str]
    use_spark: bool  # by Spark tasks (the session is up and the batch is large)
    read_ahead: bool  # by reader threads ahead of the apply (else inline)


@dataclass
class WorkerSettings:
    queue: str
    local_dsn: str
    loop_delay: float
    exception_sleep: float
    connection_lifetime: float
    parallel_copies: int
    local_max_events: int  # batches estimated at most this big are replayed without Spark
    batch_min_events: int  # a consumer behind asks for multi-tick batches of this size
    read_parts: int  # Spark tasks reading a replayed batch at once
    read_ahead: int  # provider connections reading tables ahead of the apply
    read_ahead_events: int  # smaller batches are read inline (a thread costs more)
    read_range_events: int  # larger tables are read in ev_id ranges of about this size
    warm_spark: bool  # start Spark in the background once caught up

    @classmethod
    def from_config(cls, config: Config) -> WorkerSettings:
        return cls(
            queue=queue_name(config),
            local_dsn=local_connstr(config),
            loop_delay=config.getfloat("loop_delay", SUBSCRIBER_LOOP_DELAY),
            exception_sleep=config.getfloat("exception_sleep", 20.0),
            connection_lifetime=config.getfloat("connection_lifetime", 1200.0),
            parallel_copies=config.getint("parallel_copies", 1),
            # On 2 cores a Spark job cost 0.25-1.2 s for batches of 5-8k events that the
            # driver's readers applied in 0.05-0.1 s: Spark takes the large batches only.
            local_max_events=config.getint("replay_local_events", 50000),
            batch_min_events=config.getint(
                "pgq_batch_collect_events", config.getint("replay_batch_events", 200000)
            ),
            read_parts=config.getint("replay_read_parts", 0),  # 0: Spark's parallelism
            read_ahead=config.getint("replay_read_ahead", 2),
            read_ahead_events=config.getint("replay_read_ahead_events", 2000),
            read_range_events=config.getint("replay_read_range_events", 50000),
            warm_spark=config.getbool("spark_warm", True),
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
        is held (see :func:`reposition`)."""
        super().__init__()
        self._reposition = reposition
        self.may_warm_spark = warm_spark
        self.config = config
        self.overrides = dict(overrides or {})
        self.verbose = verbose
        self._apply_settings()
        self.local: psycopg.Connection | None = None
        self.provider: psycopg.Connection | None = None
        self.provider_dsn: str | None = None
        self._connected_at = 0.0
        self._spark = None
        self._owns_spark = False  # a session that was running before us is not ours to stop
        self._spark_starting: threading.Thread | None = None
        self._replica_conn: psycopg.Connection | None = None
        self._lock_conn: psycopg.Connection | None = None  # holds the node's lock
        self._route_cache: tuple[str, float, dict[str, Route]] | None = None
        self._src_cols: dict[str, frozenset[str] | None] = {}
        self._prov_types: dict[str, bool] = {}  # the provider has this local type
        self._stages = replay.StageTables()
        self._readers: replay.ReaderPool | None = None
        self._last_heartbeat = 0.0
        self.holder = sync.SnapshotHolder()  # snapshot posted for compare / repair
        self.batches_applied = 0
        self.spark_batches = 0

    def _apply_settings(self) -> None:
        self.settings = WorkerSettings.from_config(self.config)
        self.loop_delay = self.settings.loop_delay
        self.exception_sleep = self.settings.exception_sleep

    # --- Service hooks -------------------------------------------------------------------
    def reload(self) -> None:
        from pgferry.config import load_config

        self.config = load_config(self.config.path, (self.config.section,), self.overrides)
        self._apply_settings()
        self._disconnect()

    def shutdown(self) -> None:
        if self._spark_starting is not None:
            self._spark_starting.join()
        self.holder.release()
        self._disconnect()
        if self._spark is not None and self._owns_spark:
            with contextlib.suppress(Exception):  # best effort at exit
                self._spark.stop()
        self._spark = None

    def on_error(self, exc: BaseException) -> None:
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
        self._close_readers()
        self._stages.reset()

    def _close_readers(self) -> None:
        if self._readers is not None:
            self._readers.close()
            self._readers = None

    def _forget_shapes(self) -> None:
        """Drop what was learnt of the tables' shapes on both sides (they may have changed)."""
        self._src_cols, self._prov_types = {}, {}
        self._stages.reset()

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
            replay.set_text_format(self.provider)
            self.provider_dsn = dsn
            self._forget_shapes()  # what the provider has may differ
            self._close_readers()
        return self.provider

    def _reader_pool(self) -> replay.ReaderPool:
        if self._readers is None:
            self._readers = replay.ReaderPool(self.provider_dsn or "", self.settings.read_ahead)
        return self._readers

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
            reposition(self.config, reset=self._reposition == "reset")
            self._reposition = None

    def spark(self):
        """The Spark session, created on first use (a root worker never starts one)."""
        if self._spark is None:
            if self._spark_starting is not None:
                self._spark_starting.join()
                self._spark_starting = None
            if self._spark is None:
                self._start_spark()
        return self._spark

    def spark_ready(self, start: bool = True) -> bool:
        """True when the session runs; otherwise (with ``start``) start it in the background.

        Starting Spark takes from seconds to half a minute on a busy machine: replay never
        waits for it (the driver path handles the batch meanwhile).
        """
        if self._spark is not None:
            return True
        if not start:
            return False
        if self._spark_starting is None:
            self._spark_starting = threading.Thread(
                target=self._start_spark_quietly, name="spark-start", daemon=True
            )
            self._spark_starting.start()
        elif not self._spark_starting.is_alive():
            self._spark_starting = None
        return self._spark is not None

    def _start_spark(self) -> None:
        from pyspark.sql import SparkSession

        from pgferry.pipeline.spark import get_spark

        owns = SparkSession.getActiveSession() is None
        session = get_spark(
            master=self.config.spark_master,
            app_name=f"pgferry-{self.config.job_name}",
            settings=self.config.spark_settings(),
            verbose=self.verbose > 1,
        )
        self._owns_spark, self._spark = owns, session

    def _start_spark_quietly(self) -> None:
        try:
            self._start_spark()
            # One tiny task per slot starts the Python workers, the slow part of a first job.
            assert self._spark is not None
            slots = max(1, self._spark.sparkContext.defaultParallelism)
            self._spark.sparkContext.parallelize(range(slots), slots).count()
            log.debug("Spark warm-up done")
        except Exception as exc:  # noqa: BLE001 - the driver path goes on; logged once
            log.warning("Spark did not start, replaying on the driver: %s", exc_message(exc))

    # --- the loop ------------------------------------------------------------------------
    def _work(self) -> bool:
        self.claim()  # again after a lost connection: another worker may have started
        local = self._local()
        with local.transaction():
            node = model.worker_node(local, self.settings.queue)
        if node.node_type == "root":
            return self._root_step(local, node)
        if node.paused:
            self._heartbeat(local, node.queue_name, node.consumer_name)
            return False
        return self._subscriber_step(local, node)

    def _root_step(self, local: psycopg.Connection, node: model.NodeInfo) -> bool:
        # Nothing waits on the root worker: it keeps the original's 1 s default pace.
        self.loop_delay = self.config.getfloat("loop_delay", 1.0)
        with local.transaction():
            sent = publish_seqs.publish(local, node.queue_name)
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
            routes = self._routes(local, queue)
            seqs = publish_seqs.local_sequences(local, queue)
            request = sync.pending_request(local, queue, consumer)
        self.holder.release_if_done(request)
        if request is not None and request.tick_id:
            if request.state == "wait" and node.last_tick_id == request.tick_id:
                self.holder.post(self.settings.local_dsn, queue, consumer)
                return True
            if request.state == "ready" and request.pause:
                return False  # repair --apply works on the data as of that tick

        group = handover.pending_group(local, queue, routes)
        local.rollback()
        if group:
            copied = handover.copy_group(
                spark_factory=self.spark,
                local=local,
                provider=provider,
                provider_dsn=self.provider_dsn or "",
                local_dsn=self.settings.local_dsn,
                queue=queue,
                group=group,
                max_parallel=self.settings.parallel_copies,
            )
            if copied:
                return True

        # While compare waits for a tick, single-tick batches so the worker stops exactly there.
        min_count = None
        if request is None:
            ticks, events = queue_api.pending(provider, queue, node.last_tick_id)
            if ticks > 1:
                min_count = max(1, min(events, self.settings.batch_min_events))
        batch_id = queue_api.next_batch(provider, queue, consumer, min_count=min_count)
        if batch_id is None:
            self._heartbeat(local, queue, consumer)
            if self.may_warm_spark and self.settings.warm_spark:
                # Caught up: a good moment to start Spark for the next copy or large batch,
                # rather than during a catch-up, where its start would compete for the CPU.
                self.spark_ready()
            return False
        batch = queue_api.batch_info(provider, batch_id)

        if node.last_tick_id == batch.tick_id:
            # Applied before a crash, finish was lost: finish now, apply nothing.
            log.info("Batch %s (tick %s) already applied, finishing it", batch_id, batch.tick_id)
            if node.node_type == "branch":
                forward.ensure_tick(local, queue, batch)
            queue_api.finish_batch(provider, batch_id)
            return True
        if node.last_tick_id is not None and node.last_tick_id != batch.prev_tick_id:
            # This node's recorded tick is the truth: the provider's position moved on
            # without it (a commit lost here) or fell back (a finish lost there).
            previous = rewind_provider(provider, queue, consumer, node.last_tick_id)
            log.warning(
                "Provider position of %s was tick %s, this node applied up to tick %s:"
                " repositioned",
                consumer,
                previous,
                node.last_tick_id,
            )
            return True

        started = time.monotonic()
        stats = self._apply(local, provider, node, batch, routes, seqs)
        if node.node_type == "branch":
            forward.ensure_tick(local, queue, batch)
        queue_api.finish_batch(provider, batch_id)
        self.batches_applied += 1
        self.spark_batches += stats.spark
        log.debug(
            "batch %s tick %s%s: %d upserts, %d deletes, %d truncates in %.3fs"
            " (summary %.3fs, apply %.3fs, commit %.3fs)",
            batch_id,
            batch.tick_id,
            " (spark)" if stats.spark else "",
            stats.upserts,
            stats.deletes,
            stats.truncates,
            time.monotonic() - started,
            stats.summary_seconds,
            stats.apply_seconds,
            stats.commit_seconds,
        )
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

    def _routes(self, local: psycopg.Connection, queue: str) -> dict[str, Route]:
        """The registry, re-read only when it changed or is older than ROUTES_MAX_AGE."""
        signature = registry_signature(local, queue)
        cached = self._route_cache
        if (
            cached is None
            or cached[0] != signature
            or time.monotonic() - cached[1] > ROUTES_MAX_AGE
        ):
            cached = (signature, time.monotonic(), load_routes(local, queue))
            self._route_cache = cached
            self._forget_shapes()
        return cached[2]

    def _source_columns(
        self, provider: psycopg.Connection, active: list[Route]
    ) -> dict[str, frozenset[str] | None]:
        for route in active:
            if route.table_name not in self._src_cols:
                self._src_cols[route.table_name] = source_columns(provider, route.table_name)
        return self._src_cols

    def _provider_types(self, provider: psycopg.Connection, active: list[Route]) -> dict:
        """Whether the provider has each of the subscriber's own column types (cached)."""
        wanted = {t for r in active if not r.builtin_types for t in r.types}
        missing = sorted(wanted - self._prov_types.keys())
        if missing:
            self._prov_types.update(types_present(provider, missing))
        return self._prov_types

    def _heartbeat(self, local: psycopg.Connection, queue: str, consumer: str) -> None:
        """At most one write per HEARTBEAT_EVERY seconds while idle."""
        now = time.monotonic()
        if now - self._last_heartbeat >= HEARTBEAT_EVERY:
            with local.transaction():
                model.heartbeat(local, queue, consumer)
            self._last_heartbeat = now

    def _apply(self, local, provider, node, batch, routes, seqs) -> replay.ApplyStats:
        try:
            return self._apply_batch(local, provider, node, batch, routes, seqs)
        except BaseException:
            self._stages.reset()  # stage tables created in the failed transaction are gone
            raise

    def _apply_batch(self, local, provider, node, batch, routes, seqs) -> replay.ApplyStats:
        queue, consumer = node.queue_name, node.consumer_name
        batch_sql = queue_api.batch_event_sql(provider, batch.batch_id)
        # One read of the batch says what it holds, queued scripts included.
        summary_at = time.monotonic()
        summary = replay.summarize(provider, batch_sql, routes, seqs, Segment(), scripts=True)
        summary_seconds = time.monotonic() - summary_at
        scripts = queue_api.scripts(provider, batch_sql) if replay.count_scripts(summary) else []
        estimate = None
        if batch.event_seq is not None and batch.prev_event_seq is not None:
            estimate = batch.event_seq - batch.prev_event_seq
        big = estimate is None or estimate > self.settings.local_max_events
        applies = any(r.applies for r in routes.values())
        # A batch never starts Spark: a JVM starting during a catch-up takes the CPU the
        # catch-up needs.  The session comes up once caught up, or for an initial copy.
        use_spark = applies and not scripts and big and self.spark_ready(start=False)
        read_ahead = estimate is None or estimate > self.settings.read_ahead_events
        reading = _Reading(batch.batch_id, batch_sql, list(seqs), use_spark, read_ahead)
        with local.transaction():
            # The provider forgets the batch once it is finished: the transaction that
            # records it must be on disk first, whatever the server's default.
            local.execute("set local synchronous_commit = on")
            staged_at = time.monotonic()
            stats = replay.ApplyStats()
            after = None
            for script in [*scripts, None]:
                upto = script[0] if script else None
                segment_summary = None if scripts else summary
                stats.add(
                    self._apply_segment(
                        local, provider, reading, routes, Segment(after, upto), segment_summary
                    )
                )
                if script:
                    self._run_script(local, node, batch, script, routes, seqs)
                    # The script may change tables: rows after it use the new shapes.
                    routes = load_routes(local, queue)
                    self._route_cache = None
                    self._forget_shapes()
                after = upto
            stats.apply_seconds = time.monotonic() - staged_at
            if node.node_type == "branch":
                forward.forward_events(local, provider, queue, batch_sql)
            done = handover.promote(local, queue, batch.tick_snapshot)
            model.record_tick(
                local,
                queue,
                consumer,
                batch.tick_id,
                batch.tick_time,
                batch.prev_tick_id,
                node.provider_node,
            )
            if scripts:  # only a script can leave a failed event behind
                skip.clear_failure(local, queue, consumer)
            commit_at = time.monotonic()
        stats.commit_seconds = time.monotonic() - commit_at
        stats.summary_seconds = summary_seconds
        for table in done:
            log.info("Table %s is now ok", table)
        stats.spark = use_spark
        return stats

    def _apply_segment(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        reading: _Reading,
        routes: dict[str, Route],
        segment: Segment,
        summary: list[tuple] | None,
    ) -> replay.ApplyStats:
        batch_sql, seqs, use_spark = reading.batch_sql, reading.seqs, reading.use_spark
        active = [r for r in routes.values() if r.applies]
        src_cols = self._source_columns(provider, active)
        read_ahead = reading.read_ahead or use_spark
        if summary is None:
            summary = replay.summarize(provider, batch_sql, routes, seqs, segment)
        plan = replay.plan_segment(
            summary,
            routes,
            seqs,
            src_cols,
            range_events=self.settings.read_range_events if read_ahead else None,
            binary=_major(provider) == _major(local),
            provider_types=self._provider_types(provider, active),
        )
        readers = None
        if use_spark and plan.tables:
            readers = self._spark_readers(reading.batch_id)
        elif read_ahead and len(plan.tables) > 1:
            readers = self._reader_pool()
        return replay.apply_segment(
            local, self._stages, plan, batch_sql, segment, provider=provider, readers=readers
        )

    def _spark_readers(self, batch_id: int) -> replay.ReaderPool:
        """Readers whose every query is one Spark task (a job each, submitted by as many
        threads as Spark has slots, so reading stays ahead of the apply)."""
        dsn = self.provider_dsn or ""
        sc = self.spark().sparkContext

        def read(query: str, binary: bool) -> list[bytes]:
            try:
                sc.setJobDescription(f"pgferry replay batch {batch_id}")
                return (
                    sc.parallelize([(query, binary)], 1)
                    .map(lambda qb: replay.read_part(dsn, qb[0], qb[1]))
                    .collect()[0]
                )
            except Exception as exc:  # noqa: BLE001 - Py4J wraps executor failures
                from pgferry.pipeline.spark import job_error  # slow to import: only here

                raise replay.ReplayError(f"batch {batch_id}: {job_error(exc)}") from None

        slots = self.settings.read_parts or sc.defaultParallelism
        return replay.ReaderPool(dsn, slots, remote=read)

    def _run_script(self, local, node, batch, script: tuple, routes, seqs) -> None:
        """A queued script, in the applying transaction, between the rows around it.

        A script that fails stops replay here (the transaction rolls back, the position is
        kept); the failing event is recorded so that ``skip-event`` can name it.  A script
        the operator skipped is passed over.
        """
        from pgferry.scripts.execute import EXECUTE_EVENT, apply_script_event

        ev_id, script_sql, file_name, attrs_text, tables_json = script
        queue = node.queue_name
        if skip.is_skipped(local, queue, batch.tick_id, ev_id):
            log.warning("%s: skipped by the operator (event %s)", file_name, ev_id)
            return
        try:
            with local.transaction():  # a savepoint: the error text must stay readable
                apply_script_event(
                    local,
                    queue,
                    script_sql=script_sql,
                    file_name=file_name,
                    attrs_text=attrs_text,
                    queue_tables_json=tables_json,
                    local_names={r.table_name: r.dest_fq for r in routes.values()},
                    local_seqs=frozenset(seqs),
                )
        except (psycopg.Error, PgferryError) as exc:
            error = error_text(exc) if isinstance(exc, psycopg.Error) else str(exc)
            raise skip.EventFailed(
                skip.FailedEvent(
                    queue,
                    node.consumer_name,
                    batch.tick_id,
                    ev_id,
                    EXECUTE_EVENT,
                    file_name,
                    error,
                )
            ) from None


def _major(conn: psycopg.Connection) -> int:
    return conn.info.server_version // 10000


def reposition(config: Config, *, reset: bool) -> None:
    """Put this node's consumer position on its provider back in line with the node.

    Rewind: to the tick last applied here (after a restore of the provider).  Reset: to the
    provider's newest tick, recorded here too: everything in between is skipped, so the
    tables must be resynced afterwards.
    """
    queue = queue_name(config)
    with connect(local_connstr(config)) as local:
        node = model.worker_node(local, queue)
        if node.node_type == "root" or node.provider_location is None:
            raise NodeError("--rewind / --reset are for branch and leaf nodes")
        with connect(remote_connstr(config, node.provider_location), autocommit=True) as prov:
            tick = queue_api.last_tick(prov, queue)[0] if reset else node.last_tick_id
            if tick is None:
                raise NodeError("no tick to reposition to")
            if reset:
                queue_api.register_at(prov, queue, node.consumer_name, tick)
            else:
                rewind_provider(prov, queue, node.consumer_name, tick)
        if reset:
            model.set_position(local, queue, node.consumer_name, tick)
    log.info("Consumer %s positioned at tick %s", node.consumer_name, tick)


def rewind_provider(provider: psycopg.Connection, queue: str, consumer: str, tick: int) -> int:
    """This node's recorded tick is the truth: move the provider's position to it."""
    try:
        return queue_api.rewind(provider, queue, consumer, tick)
    except QueueError as exc:
        raise NodeError(
            f"Lost position: this node applied up to tick {tick}, but {exc}; reposition with"
            " 'worker --reset', then resync this node's tables (resync --all)"
        ) from None
