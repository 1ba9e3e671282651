"""One batch's apply transaction on the node, and the batch's end inside it.

:class:`BatchTransaction` is the transaction that applies a batch (:mod:`.batch`): on
entry it begins, the stage tables learn it (:class:`~pgferry.apply.replay.stage_tables.StageTables`)
and, for the node's own stream, the node's position is held against a pause or a move
until it ends (:func:`pgferry.node.model.hold_position`); its exit commits.  Between the
two the segments and scripts are applied, then :meth:`BatchTransaction.end_batch` closes the
batch in the same transaction: the tables and sequences the provider removed detached
(:mod:`.removals`), the events forwarded into a branch's own queue, the copy filters that
can no longer match cleared, then the divergence the rows found counted and the batch's
tick recorded, or a copied group's catch-up position.  The tick and the rows commit
together: that is what makes the apply exactly-once.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from types import TracebackType

import psycopg

from pgferry.apply import forward, handover
from pgferry.apply.replay import removals as removals_
from pgferry.apply.replay.one_connection import ApplyStats
from pgferry.apply.replay.read import RemovalEvent
from pgferry.apply.replay.stage_tables import StageTables
from pgferry.apply.replay.two_connections import SecondApply
from pgferry.node import model
from pgferry.queue.batches import Batch
from pgferry.registry import copystate
from pgferry.registry.routes import Route
from pgferry.scripts import skip

log = logging.getLogger(__name__)


class BatchTransaction:
    """The transaction on ``local`` that applies ``batch`` (see the module docstring);
    ``catchup``: the batch is a copied group's own, whose position is its group's."""

    def __init__(
        self,
        local: psycopg.Connection,
        stages: StageTables,
        node: model.NodeInfo,
        batch: Batch,
        catchup: copystate.CatchUp | None,
    ) -> None:
        self.local = local
        self.stages = stages
        self.node = node
        self.batch = batch
        self.catchup = catchup
        self.commit_seconds = 0.0
        self._stack = ExitStack()

    def __enter__(self) -> BatchTransaction:
        with ExitStack() as stack:
            stack.enter_context(self.local.transaction())
            self.stages.new_transaction()  # committed durably: see WorkerConnections
            if self.catchup is None:
                # A pause or move now waits for this batch (a lake commit and its tick).
                node = self.node
                model.hold_position(
                    self.local,
                    node.queue_name,
                    node.consumer_name,
                    self.batch.prev_tick_id,
                    node.provider_node,
                )
            self._stack = stack.pop_all()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        commit_at = time.monotonic()
        try:
            return self._stack.__exit__(exc_type, exc, tb)
        finally:
            self.commit_seconds = time.monotonic() - commit_at

    def end_batch(
        self,
        provider: psycopg.Connection,
        batch_sql: str,
        routes: dict[str, Route],
        stats: ApplyStats,
        removals: list[RemovalEvent],
        second: SecondApply,
        *,
        scripts: bool,
        staged_at: float,
    ) -> list[str]:
        """The batch's end, after its rows and scripts (``stats``; ``scripts``: it held
        some); returns the provider's copy consumers that only removed tables needed, to
        be dropped after the commit."""
        local = self.local
        node = self.node
        batch = self.batch
        catchup = self.catchup
        queue = node.queue_name
        consumer = node.consumer_name
        # Removals come after every row of the batch, not as barriers in ev_id order:
        # dropping the source's capture triggers waits for every writer of the table,
        # so all its events sit in this batch or an earlier one; a branch's own removal
        # takes its ev_id from the branch's sequence (it can be lower than forwarded
        # events before it); and the batch stays one segment (one summary).
        stale_consumers = removals_.apply_removals(local, node, removals) if removals else []
        stats.apply_seconds = time.monotonic() - staged_at
        if catchup is None:
            if node.node_type == "branch":
                forward.forward_events(local, provider, queue, batch_sql, routes)
            if any(r.copy_snapshot for r in routes.values()):  # else nothing to clear
                handover.clear_snapshots(local, queue, batch.tick_snapshot)
        # Rows this batch found missing here (changed behind replication's back), counted
        # with its position; a chunked copy's catch-up meets such rows by design
        # (docs/replication.md).
        if catchup is None or not catchup.chunked:
            record_divergence(local, queue, consumer, stats, tick_id=batch.tick_id)
        if catchup is not None:
            handover.record_catchup(local, queue, catchup, batch.tick_id)
        else:
            model.record_tick(
                local,
                queue,
                consumer,
                batch.tick_id,
                batch.tick_time,
                batch.prev_tick_id,
                node.provider_node,
                tables=sorted(stats.tables),
            )
            if second.maybe_left:
                second.forget(local, queue, consumer)
        if scripts:  # only a script can leave a failed event behind
            skip.clear_failure(local, queue, consumer)
        return stale_consumers


def record_divergence(
    conn: psycopg.Connection,
    queue: str,
    consumer: str,
    stats: ApplyStats,
    *,
    tick_id: int | None = None,
) -> None:
    """Add a batch's divergence to the node's totals, in the transaction that applied it
    (a batch that rolls back counts nothing), and log it in one line; nothing when the
    batch found none."""
    if not stats.recreated and not stats.missing_deletes:
        return
    tables = sorted(stats.diverged)
    text = "; ".join(divergence_text(table, *stats.diverged[table]) for table in tables)
    model.add_divergence(
        conn, queue, consumer, stats.recreated, stats.missing_deletes, ", ".join(tables)
    )
    log.warning("diverged%s: %s", f" at tick {tick_id}" if tick_id is not None else "", text)


def divergence_text(table: str, recreated: int, missing_deletes: int) -> str:
    """'re-created 3 rows of public.t missing here, 1 delete found no row'."""
    parts = []
    if recreated:
        parts.append(f"re-created {_rows(recreated)} of {table} missing here")
    if missing_deletes:
        deletes = f"{missing_deletes} delete{'s' if missing_deletes != 1 else ''}"
        where = "" if recreated else f" of {table}"
        parts.append(f"{deletes}{where} found no row")
    return ", ".join(parts)


def _rows(n: int) -> str:
    return f"{n} row{'s' if n != 1 else ''}"
