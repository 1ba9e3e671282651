"""What the worker does for a pending ``compare`` / ``repair`` request on its node.

A request (:mod:`.sync`) names the tick both sides are to be read at.  Before each step of
the main stream :func:`before_batch` says whether the worker may take a batch at all (not
while compare chooses the tick, not while ``repair --apply`` works on the data), posts the
node's snapshot when the node stands at the tick, and marks the request missed when the
node passed it.  After a batch :func:`after_batch` does the same for the tick the batch
reached.  The worker takes one tick per batch while a request waits, so that it stops
exactly there (:mod:`.worker`).
"""

from __future__ import annotations

import logging

import psycopg

from pgferry.apply import sync
from pgferry.queue.batches import Batch

log = logging.getLogger(__name__)


def before_batch(
    local: psycopg.Connection,
    holder: sync.SnapshotHolder,
    request: sync.Request | None,
    last_tick_id: int | None,
    local_dsn: str,
    queue: str,
    consumer: str,
) -> tuple[bool | None, sync.Request | None]:
    """(None, the request still pending) when the worker may take a batch; otherwise
    (the loop's result, the request): the step ends there."""
    holder.release_if_done(request)
    if request is not None and request.state == "wait" and not request.tick_id:
        if not request.stale:
            # compare is choosing the tick (on a branch provider, one that exists
            # already): apply nothing meanwhile, or this node could pass it.
            return False, request
        log.warning("Dropping a compare request left without a tick by a stopped command")
        with local.transaction():
            sync.drop_request(local, queue, consumer)
        request = None
    if request is not None and request.tick_id:
        if request.state == "wait" and last_tick_id == request.tick_id:
            holder.post(local_dsn, queue, consumer)
            return True, request
        if request.state == "wait" and last_tick_id is not None and last_tick_id > request.tick_id:
            with local.transaction():
                sync.mark_missed(local, queue, consumer)  # compare tries another tick
            return True, request
        if request.state == "ready" and request.pause:
            return False, request  # repair --apply works on the data as of that tick
    return None, request


def after_batch(
    local: psycopg.Connection,
    holder: sync.SnapshotHolder,
    request: sync.Request | None,
    batch: Batch,
    local_dsn: str,
    queue: str,
    consumer: str,
) -> None:
    """``batch`` was applied and finished: post the snapshot at the request's tick, or
    mark the request missed when the batch passed over it."""
    if request is None or not request.tick_id or request.state != "wait":
        return
    if batch.tick_id == request.tick_id:
        holder.post(local_dsn, queue, consumer)
    elif batch.prev_tick_id is not None and batch.prev_tick_id < request.tick_id < batch.tick_id:
        with local.transaction():
            sync.mark_missed(local, queue, consumer)
