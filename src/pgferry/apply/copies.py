"""The copies a worker runs beside its loop: which groups start, how many at once, retries,
and each copied group's catch-up until it joins the main stream.

At most ``parallel_copies`` tables copy at the same time (a group larger than that copies
alone).  A group whose copy failed is tried again after ``exception_sleep`` seconds, one
whose tables the provider does not hold in state ok yet after a second; its last error is
kept in ``ferry.table_info.copy_error`` for ``tables`` to show.  Each copy is a
:class:`~pgferry.apply.copyrun.CopyRun` thread; this module decides when.  Once copied, a
group replays its own consumer's batches in the worker's loop (:meth:`Copies.catch_up`),
never past the main stream's tick, and joins it there (see :mod:`.handover`).  A group
copied from a node upstream of the provider reads that node's queue: this module keeps a
connection and a replayer for each such node while groups read it.

The worker hands :class:`Copies` the parts of itself a copy needs (its settings, provider
connection, replayer, Spark session, and a callback counting applied batches); the worker
imports this module, this module knows nothing of the worker.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace

import psycopg

from pgferry.apply import handover, positions
from pgferry.apply.connections import WorkerConnections
from pgferry.apply.copyrun import CopyRun
from pgferry.apply.replay.batch import Replayer
from pgferry.apply.replay.one_connection import ApplyStats
from pgferry.apply.replay.read import set_text_format
from pgferry.apply.replay.spark_session import WorkerSpark
from pgferry.apply.worker_settings import WorkerSettings
from pgferry.config import Config
from pgferry.db import connect
from pgferry.errors import NodeError, PgferryError
from pgferry.node import copynode, model
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import Batch
from pgferry.registry import copystate, entries
from pgferry.registry.routes import Route

log = logging.getLogger(__name__)

WAIT_PROVIDER_RETRY = 1.0  # seconds: the provider's own copy of the table is not done yet

# Told of each batch a copied group applied: (batch, stats, monotonic start, what).
BatchApplied = Callable[[Batch, ApplyStats, float, str], None]


class Copies:
    """The worker's running copies (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        settings: WorkerSettings,
        conns: WorkerConnections,
        replay: Replayer,
        spark: WorkerSpark,
        on_applied: BatchApplied,
    ) -> None:
        self.config, self.settings = config, settings  # replaced when the worker reloads
        self._conns = conns  # the worker's: its provider connection
        self._replay = replay  # the worker's replayer, for groups reading the provider
        self._spark = spark
        self._on_applied = on_applied
        self.runs: dict[str, CopyRun] = {}
        # Upstream nodes whose queues copied groups read: connection and replayer each.
        self._sources: dict[str, tuple[psycopg.Connection, Replayer]] = {}
        self._retry_at: dict[str, float] = {}
        self._cleaned = False

    def running_tables(self) -> int:
        return sum(len(r.group.tables) for r in self.runs.values() if r.running())

    def to_look_at(self, tables_settled: bool) -> bool:
        """Whether :meth:`start_pending` and :meth:`catch_up` have anything to do: a table
        not ``ok`` (``tables_settled`` is False), a run to reap, or the first clean-up."""
        return not tables_settled or bool(self.runs) or not self._cleaned

    def start_pending(self, local: psycopg.Connection, node: model.NodeInfo, dsn: str) -> int:
        """Start copies of waiting groups, as many as ``parallel_copies`` allows."""
        queue = node.queue_name
        self._reap(queue)
        with local.transaction():
            pending = handover.pending_groups(
                local, queue, self._replay.handlers, combined=node.combined_queue is not None
            )
            registered = {e.table_name for e in entries.list_tables(local, queue)}
        for run in list(self.runs.values()):
            if run.running() and not registered.intersection(run.group.tables):
                # Removed meanwhile (on this node or by its provider): stop copying it.
                log.info("Tables %s were removed: stopping their copy", ", ".join(run.group.tables))
                run.cancel()
        if not self._cleaned and self._conns.provider is not None:
            # Group consumers left by removed or resynced tables hold events back: drop them.
            stale = handover.forget_stale_consumers(
                local, self._conns.provider, queue, node.consumer_name
            )
            stale += self._forget_upstream(local, node)
            if stale:
                log.info("Dropped stale copy consumers: %s", ", ".join(stale))
            self._cleaned = True
        limit = max(1, self.settings.parallel_copies)
        busy, started, now = self.running_tables(), 0, time.monotonic()
        for group in pending:
            if group.group_id in self.runs or self._retry_at.get(group.group_id, 0) > now:
                continue
            if busy and busy + len(group.tables) > limit:
                break
            run = CopyRun(
                group=group,
                node=node,
                local_dsn=self.settings.local_dsn,
                provider_dsn=dsn,
                dsn_of=self._dsn_of,
                spark_factory=self._spark.get,
                handlers=self._replay.handlers,
                snapshot_max=self.settings.copy_snapshot_max,
                chunk_rows=self.settings.copy_chunk_rows,
            )
            run.start()
            self.runs[group.group_id] = run
            busy += len(group.tables)
            started += 1
        return started

    def _reap(self, queue: str) -> None:
        """Forget finished runs; schedule the retry of those that did not finish the copy."""
        now = time.monotonic()
        for group_id, run in list(self.runs.items()):
            if run.running():
                continue
            del self.runs[group_id]
            if run.error:
                self._retry_at[group_id] = now + self.settings.exception_sleep
                _record_error(self.settings.local_dsn, queue, run.group, run.error)
            elif run.waiting:
                self._retry_at[group_id] = now + WAIT_PROVIDER_RETRY
            else:
                self._retry_at.pop(group_id, None)

    def cancel(self) -> None:
        """Stop every running copy (the worker stops); their tables stay ``in-copy``."""
        for run in self.runs.values():
            run.cancel()
        self.runs.clear()
        self.close()

    def close(self) -> None:
        """Close the connections to upstream nodes (the worker disconnects)."""
        for conn, replayer in self._sources.values():
            replayer.close()
            with contextlib.suppress(Exception):
                conn.close()
        self._sources.clear()

    def _dsn_of(self, location: str) -> str:
        return copynode.dsn_of(self.config)(location)

    def _forget_upstream(self, local: psycopg.Connection, node: model.NodeInfo) -> list[str]:
        """Group consumers this node left on the queues of nodes above its provider."""
        stale: list[str] = []
        try:
            with local.transaction():
                above = copynode.upstream(self._dsn_of, node, [])[1:]
            for peer in above:
                with connect(peer.dsn, autocommit=True) as conn:
                    stale += handover.forget_stale_consumers(
                        local, conn, node.queue_name, node.consumer_name, node.node_name
                    )
        except (psycopg.Error, PgferryError) as exc:  # looked at again when a worker starts
            log.warning("Could not look for stale copy consumers upstream: %s", exc)
        return stale

    def _source(
        self, local: psycopg.Connection, node: model.NodeInfo, name: str
    ) -> tuple[psycopg.Connection, Replayer]:
        """Connection and replayer for the queue of upstream node ``name``."""
        found = self._sources.get(name)
        if found is not None and not found[0].closed:
            return found
        if found is not None:
            found[1].close()
        with local.transaction():
            members = {m.node_name: m for m in model.members(local, node.queue_name)}
        if name not in members:
            raise NodeError(f"Copy node {name} is no longer a member of the cascade")
        dsn = self._dsn_of(members[name].node_location)
        conn = connect(dsn, autocommit=True, application_name="pgferry-worker")
        set_text_format(conn)
        replayer = Replayer(self.settings.replay, self._spark, self._replay.handlers)
        replayer.use_provider(dsn)
        self._sources[name] = (conn, replayer)
        return conn, replayer

    # --- catching up, in the loop ----------------------------------------------------
    def catch_up(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        node: model.NodeInfo,
        routes: dict[str, Route],
    ) -> tuple[bool | None, int | None]:
        """One step of every copied group that replays its own batches (see
        :mod:`.handover`).  Returns (whether a batch was applied, or None when a group
        joined the main stream; the tick the main stream must stop at for a group ahead)."""
        queue = node.queue_name
        with local.transaction():
            groups = copystate.catching_up(local, queue)
            if groups:
                # Read after the groups: a copy thread may have moved a group to
                # catching-up since the caller read the routes, and its tables' routes must
                # carry the copy snapshot that filters the events the copy already holds.
                routes = self._replay.routes(local, queue)
        applied, hold_at = False, None
        for group in groups:
            source, replayer = provider, self._replay
            if group.node is not None:
                source, replayer = self._source(local, node, group.node)
            if group.tick != node.last_tick_id:
                if node.last_tick_id is not None and group.tick > node.last_tick_id:
                    # The group went past the main stream (a crash in between, or it reads
                    # an upstream node's queue that was ahead): the main stream takes one
                    # tick per batch until it meets the group there.
                    hold_at = group.tick if hold_at is None else min(hold_at, group.tick)
                    continue
                reached = self._catchup_batch(local, source, replayer, node, routes, group)
                applied = applied or reached is not None
                if reached != node.last_tick_id:
                    continue
            if not group.may_join:
                continue  # at the main stream's tick, but not yet past its copy snapshot
            with local.transaction():
                handover.join_main(local, queue, group)
            handover.drop_consumer(source, queue, group.consumer)
            for table in group.tables:
                log.info("Table %s is now ok", table)
            return None, None
        return applied, hold_at

    def _catchup_batch(
        self,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        replayer: Replayer,
        node: model.NodeInfo,
        routes: dict[str, Route],
        group: copystate.CatchUp,
    ) -> int | None:
        """Apply the group's next batch from ``provider`` (the queue the group reads); the
        tick the group has reached (None: nothing)."""
        queue, consumer = node.queue_name, group.consumer
        # Large batches, but never past the main stream's tick: the group meets it there.
        assert node.last_tick_id is not None
        batch_id = queue_batches.next_batch_upto(
            provider, queue, consumer, node.last_tick_id, self.settings.batch_min_events
        )
        if batch_id is None:
            return None
        batch = queue_batches.batch_info(provider, batch_id)
        if not positions.follows(provider, queue, consumer, group.tick, batch):
            return group.tick if batch.tick_id == group.tick else None
        # The group's tables only, applied like the main stream applies 'ok' tables.
        own = {
            name: replace(route, merge_state="ok")
            for name, route in routes.items()
            if name in group.tables
        }
        started = time.monotonic()
        stats = replayer.apply(local, provider, node, batch, own, [], catchup=group)
        queue_batches.finish_batch(provider, batch_id)
        if group.filtered:
            with local.transaction():
                handover.pass_snapshot(local, queue, group, batch.tick_snapshot)
        self._on_applied(batch, stats, started, f" ({', '.join(group.tables)})")
        return batch.tick_id


def _record_error(dsn: str, queue: str, group: handover.CopyGroup, error: str) -> None:
    with contextlib.suppress(psycopg.Error), connect(dsn, autocommit=True) as conn:
        copystate.set_copy_error(conn, queue, group.tables, error)
