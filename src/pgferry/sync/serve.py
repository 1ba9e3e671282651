"""The worker's side of a sync point: the request it serves and the snapshot it posts.

``compare`` and ``repair`` (:mod:`.point`) file a request in the node's
``ferry.sync_request`` naming the tick both sides are to be read at.  The worker reads its
requests with each loop (:data:`REQUESTS_SQL`, :func:`request_of`; the idle check's
:data:`REQUESTS_STAMP`).  Before each step of the main stream :func:`before_batch` says
whether the worker may take a batch at all (not while compare chooses the tick, not while
``repair --apply`` works on the data), posts the node's snapshot when the node stands at
the tick (:class:`SnapshotHolder`, which keeps its transaction open until the request is
dropped), and marks the request missed when the node passed it.  After a batch
:func:`after_batch` does the same for the tick the batch reached.  The worker takes one
tick per batch while a request waits, so that it stops exactly there
(:mod:`pgferry.apply.worker`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pgferry.db import connect
from pgferry.queue.batches import Batch

log = logging.getLogger(__name__)

HOLD_LIMIT = 3600.0  # a snapshot is never held longer, whatever happened to the requester
# A request still without its tick after this many seconds was left by a command that died
# while choosing it (choosing takes a second or two): the worker drops it and goes on.
CHOOSE_LIMIT = 60.0


@dataclass(frozen=True)
class Request:
    tick_id: int
    state: str
    pause: bool
    stale: bool = False  # still without a tick after CHOOSE_LIMIT: its command is gone


# A queue's requests as one text that changes whenever one does (the worker's idle check;
# parameter {q}: the queue), and whether there is none.
REQUESTS_STAMP = sql.SQL(
    """(select string_agg(concat_ws(',', r.consumer_name, r.xmin), ';' order by r.consumer_name)
          from ferry.sync_request r where r.queue_name = {q})"""
)
NO_REQUEST = sql.SQL("not exists (select 1 from ferry.sync_request r where r.queue_name = {q})")


# The requests filed for a queue's consumers (parameters: CHOOSE_LIMIT, the queue name):
# consumer name, then the fields of Request.
REQUESTS_SQL = """
        select consumer_name, tick_id, state, pause,
               now() - requested_at > make_interval(secs => %s) as overdue
          from ferry.sync_request
         where queue_name = %s
        """


def request_of(rows: list[tuple[Any, ...]], consumer: str) -> Request | None:
    """``consumer``'s request among rows of :data:`REQUESTS_SQL`."""
    for name, tick_id, state, pause, overdue in rows:
        if name == consumer:
            return Request(tick_id, state, pause, bool(overdue))
    return None


def drop_request(conn: psycopg.Connection, queue: str, consumer: str) -> None:
    """Forget a request whose command is gone (killed before it chose its tick)."""
    conn.execute(
        "delete from ferry.sync_request where queue_name = %s and consumer_name = %s"
        " and tick_id = 0",
        (queue, consumer),
    )


class SnapshotHolder:
    """The worker's open REPEATABLE READ transaction serving one request."""

    def __init__(self) -> None:
        self.conn: psycopg.Connection | None = None
        self.since = 0.0

    def post(self, local_dsn: str, queue: str, consumer: str) -> None:
        """Export a snapshot of the data as it is now and post it to the request."""
        self.release()
        conn = connect(local_dsn, application_name="pgferry-sync")
        conn.execute("set transaction isolation level repeatable read")
        row = conn.execute("select pg_export_snapshot()").fetchone()
        assert row is not None
        self.conn, self.since = conn, time.monotonic()
        with connect(local_dsn, autocommit=True) as other:
            other.execute(
                """
                update ferry.sync_request set state = 'ready', snapshot_id = %s
                 where queue_name = %s and consumer_name = %s
                """,
                (row[0], queue, consumer),
            )
        log.info("Posted snapshot for compare")

    def release_if_done(self, request: Request | None) -> None:
        if self.conn is None:
            return
        if request is None or request.state != "ready":
            self.release()
        elif time.monotonic() - self.since > HOLD_LIMIT:
            log.warning("compare snapshot held too long, releasing it")
            self.release()

    def release(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            finally:
                self.conn = None


def mark_missed(conn: psycopg.Connection, queue: str, consumer: str) -> None:
    conn.execute(
        "update ferry.sync_request set state = 'missed' where queue_name = %s"
        " and consumer_name = %s",
        (queue, consumer),
    )


def before_batch(
    local: psycopg.Connection,
    holder: SnapshotHolder,
    request: Request | None,
    last_tick_id: int | None,
    local_dsn: str,
    queue: str,
    consumer: str,
) -> tuple[bool | None, Request | None]:
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
            drop_request(local, queue, consumer)
        request = None
    if request is not None and request.tick_id:
        if request.state == "wait" and last_tick_id == request.tick_id:
            holder.post(local_dsn, queue, consumer)
            return True, request
        if request.state == "wait" and last_tick_id is not None and last_tick_id > request.tick_id:
            with local.transaction():
                mark_missed(local, queue, consumer)  # compare tries another tick
            return True, request
        if request.state == "ready" and request.pause:
            return False, request  # repair --apply works on the data as of that tick
    return None, request


def after_batch(
    local: psycopg.Connection,
    holder: SnapshotHolder,
    request: Request | None,
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
            mark_missed(local, queue, consumer)
