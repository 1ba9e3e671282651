"""Reading provider and subscriber at one logical point, for ``compare`` and ``repair``.

Without locking the source:

1. ``compare`` (run with the subscriber's config) files a request in the subscriber's
   ``ferry.sync_request``, opens a REPEATABLE READ transaction on the provider, exports its
   snapshot and records a tick carrying exactly that snapshot (``ferry.sync_tick``).
2. The subscriber's worker takes single-tick batches while a request is filed, and right
   after committing that tick it exports a snapshot of its own and posts it (``ready``).
   It keeps that transaction open until the request is dropped (:mod:`.serve`).  With
   ``pause`` (repair --apply) it also applies nothing further, so fixes computed at the
   tick stay right.
3. The Spark compare / repair tasks import both snapshots.  No write on the source waits.

When the provider is a branch (its queue mirrors the root's ticks, so no tick can be made
for a snapshot), the branch's own worker posts a snapshot of the branch at the tick it
stands at, the same way (:func:`_branch_snapshot`), and the subscriber stops at that tick.

When the worker does not reach the tick within ``compare_wait`` seconds the command fails
with ``Consumer lagging too much, cannot proceed``.

A tick is known by its id and the provider's time of it (docs/failover.md): the tick the
subscriber's snapshot stands at is read back in that snapshot and must be the provider's
very tick, or the command fails naming the diverged provider (a node that applied the
tick of that id from a primary lost in a failover would be compared with another tick).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from pgferry import settings
from pgferry.config import Config
from pgferry.db import connect, error_text
from pgferry.errors import DatabaseError, DivergedProvider, NodeError, PgferryError
from pgferry.node import model
from pgferry.node.connect import local_connstr, queue_name, remote_connstr
from pgferry.pipeline.snapshot import open_in_snapshot
from pgferry.queue import ticks as queue_ticks

log = logging.getLogger(__name__)

LAGGING = "Consumer lagging too much, cannot proceed"


@dataclass(frozen=True)
class SyncPoint:
    provider_dsn: str
    local_dsn: str
    tick_id: int
    src_snapshot: str
    dst_snapshot: str


@contextmanager
def sync_point(config: Config, *, pause: bool = False, attempts: int = 3) -> Iterator[SyncPoint]:
    """Both sides' snapshots at one tick, valid inside the ``with`` block."""
    queue = queue_name(config)
    local_dsn = local_connstr(config)
    # Bounded like the original's lock wait: lock_timeout unless compare_wait is given.
    wait = config.get(settings.COMPARE_WAIT)
    with connect(local_dsn, autocommit=True) as local:
        node = model.worker_node(local, queue)
        if node.node_type == "root" or node.provider_location is None:
            raise NodeError(
                "compare and repair run on a branch or leaf node (against its provider)"
            )
        provider_dsn = remote_connstr(config, node.provider_location)
        with connect(provider_dsn, autocommit=True) as prov:
            branch = queue_ticks.ticked_by_provider(prov, queue)
        for attempt in range(1, attempts + 1):
            local.execute(
                """
                insert into ferry.sync_request (queue_name, consumer_name, tick_id, pause)
                values (%s, %s, 0, %s)
                on conflict (queue_name, consumer_name) do update
                    set tick_id = 0, state = 'wait', snapshot_id = null, pause = excluded.pause,
                        requested_at = now()
                """,
                (queue, node.consumer_name, pause),
            )
            source = _branch_snapshot if branch else source_snapshot
            try:
                with source(provider_dsn, queue, wait) as (src_snapshot, tick_id):
                    local.execute(
                        "update ferry.sync_request set tick_id = %s"
                        " where queue_name = %s and consumer_name = %s",
                        (tick_id, queue, node.consumer_name),
                    )
                    log.info("Waiting for the worker to apply tick %s", tick_id)
                    dst_snapshot = _wait_ready(local, queue, node.consumer_name, wait)
                    if dst_snapshot is None:
                        log.info("Worker went past tick %s, retrying (%d)", tick_id, attempt)
                        continue
                    _same_tick(
                        provider_dsn, local_dsn, queue, node.consumer_name, tick_id, dst_snapshot
                    )
                    yield SyncPoint(provider_dsn, local_dsn, tick_id, src_snapshot, dst_snapshot)
                    return
            finally:
                local.execute(
                    "delete from ferry.sync_request where queue_name = %s and consumer_name = %s",
                    (queue, node.consumer_name),
                )
    raise PgferryError(LAGGING)


def _same_tick(
    provider_dsn: str, local_dsn: str, queue: str, consumer: str, tick: int, snapshot: str
) -> None:
    """The subscriber's ``snapshot`` must stand at the provider's tick ``tick`` itself:
    the id and the provider's time of it recorded there (a time unknown on either side
    passes: a position recorded before times were)."""
    with connect(provider_dsn, autocommit=True) as prov:
        made = queue_ticks.tick_time(prov, queue, tick)
    with open_in_snapshot(local_dsn, snapshot) as conn:
        state = model.local_state(conn, queue, consumer)
    if state is None or made is None or state.last_tick_time is None:
        return
    if (state.last_tick_id, state.last_tick_time) == (tick, made):
        return
    raise DivergedProvider(
        f"Diverged provider: {consumer} applied tick {state.last_tick_id} made at"
        f" {state.last_tick_time}, but the"
        f" provider's tick {tick} was made at {made}: the provider lost ticks this node"
        " applied (failover to a standby that lacked them); nothing compared, see"
        " docs/failover.md"
    )


@contextmanager
def _branch_snapshot(provider_dsn: str, queue: str, wait: float) -> Iterator[tuple[str, int]]:
    """A branch's data at one of its ticks: its own worker posts it, as a leaf's does.

    A branch mirrors its provider's ticks, so no tick can be made for the snapshot; instead
    the branch's worker is asked, through the branch's own ``sync_request``, to post a
    snapshot right after the tick it stands at.  When it moved on before seeing the request,
    the request follows it to its new tick.  The leaf then stops at that same tick.
    """
    with connect(provider_dsn, autocommit=True, application_name="pgferry-sync") as conn:
        branch = model.worker_node(conn, queue)
        consumer = branch.consumer_name
        deadline = time.monotonic() + wait
        try:
            while True:
                tick = model.worker_node(conn, queue).last_tick_id
                if tick is None:
                    raise NodeError(f"branch {branch.node_name} has applied no tick yet")
                conn.execute(
                    """
                    insert into ferry.sync_request (queue_name, consumer_name, tick_id)
                    values (%s, %s, %s)
                    on conflict (queue_name, consumer_name) do update
                        set tick_id = excluded.tick_id, state = 'wait', snapshot_id = null,
                            pause = false, requested_at = now()
                    """,
                    (queue, consumer, tick),
                )
                try:
                    snapshot = _wait_ready(conn, queue, consumer, min(2.0, wait))
                except PgferryError:
                    snapshot = None  # not posted yet: try again at the branch's new tick
                if snapshot is not None:
                    yield snapshot, tick
                    return
                if time.monotonic() > deadline:
                    raise PgferryError(f"{LAGGING} (branch {branch.node_name})")
        finally:
            conn.execute(
                "delete from ferry.sync_request where queue_name = %s and consumer_name = %s",
                (queue, consumer),
            )


@contextmanager
def source_snapshot(provider_dsn: str, queue: str, wait: float) -> Iterator[tuple[str, int]]:
    """An exported provider snapshot and the tick recorded with it (``wait`` unused: the
    tick is made here)."""
    for _ in range(5):
        conn = connect(provider_dsn, application_name="pgferry-sync")
        try:
            conn.execute("set transaction isolation level repeatable read")
            exported = conn.execute(
                "select pg_export_snapshot(), pg_current_snapshot()::text"
            ).fetchone()
            assert exported is not None  # a SELECT without FROM answers one row
            snap_id, snap_text = exported
            try:
                with connect(provider_dsn, autocommit=True) as ticker:
                    row = ticker.execute(
                        "select ferry.sync_tick(%s, %s::pg_snapshot)", (queue, snap_text)
                    ).fetchone()
            except psycopg.errors.SerializationFailure:
                continue
            except psycopg.Error as exc:
                raise DatabaseError(f"provider: {error_text(exc)}") from None
            assert row is not None
            yield snap_id, row[0]
            return
        finally:
            conn.close()
    raise PgferryError("could not record a compare tick on the provider (ticks too frequent)")


def _wait_ready(conn: psycopg.Connection, queue: str, consumer: str, wait: float) -> str | None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        req = conn.execute(
            "select state, snapshot_id from ferry.sync_request"
            " where queue_name = %s and consumer_name = %s",
            (queue, consumer),
        ).fetchone()
        if req is None:
            break
        if req[0] == "ready":
            snapshot: str = req[1]
            return snapshot
        if req[0] == "missed":
            return None
        time.sleep(0.05)
    raise PgferryError(LAGGING)
