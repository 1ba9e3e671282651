"""Initial copy of newly attached tables beside replay, and the exact hand-over to it.

A group of tables (one add-table or resync command: same ``copy_group``) is copied in a
thread of the worker's own (:class:`~pgferry.apply.copyrun.CopyRun`) from ONE exported
snapshot C, while the main loop keeps applying batches to the node's other tables.  The
group's events must neither be lost nor applied twice, so:

1. Before C is taken, a consumer of the group's own (``copy_consumer``) is registered on
   the provider at its newest tick L0: every event not visible in L0 stays in the queue
   for it, however far the main stream moves on meanwhile.  The tables are ``in-copy``:
   the main stream skips their events.
2. After the copy the tables are ``catching-up``: the worker replays the group's
   consumer's batches for these tables only (:mod:`.copies`), skipping events visible in
   C (they are in the copy), each batch in one local transaction that also records
   ``catchup_tick``.  Once it applied a tick whose snapshot has xmin >= xmax(C), no event
   visible in C can come any more and C is cleared (:func:`pass_snapshot`).
3. When ``catchup_tick`` equals the main stream's last tick, the tables turn ``ok`` and
   the group's consumer is dropped: the next main batch starts exactly where the group
   stopped.  When the group's batch went past the main stream's tick, the main stream
   takes one tick per batch until it gets there.
4. The main stream keeps skipping events visible in C until an applied tick's snapshot
   has xmin >= xmax(C): no such event can come any more and ``copy_snapshot`` is cleared.

A copy from another node (``--copy-node``, :mod:`pgferry.node.copynode`) differs in where
the consumer reads.  From a node upstream of the provider, C is taken on that node and the
consumer reads that node's queue (``catchup_node``), whose transaction ids are C's; the
group joins only once C is cleared (step 2), since C means nothing to the provider's
events, and the main stream's tick, where it joins, is always a tick of that queue too.
From a node beside, the consumer reads the provider's queue from the tick that node had
applied in C, and there is no C to keep.

A crash during the copy leaves ``in-copy``: the copy starts again (it truncates first).
A crash during the catch-up is met like the main stream's: the group's recorded tick is
the truth, the position of the queue it reads follows it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

import psycopg

from pgferry.errors import PgferryError, QueueError
from pgferry.expressions import conjunction
from pgferry.handlers import registry as handler_registry
from pgferry.handlers.api import HandlerContext
from pgferry.node import capture
from pgferry.queue import api as queue_api
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import copystate
from pgferry.registry.copystate import CatchUp

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class CopyGroup:
    """Tables waiting for their copy, copied together under one snapshot."""

    group_id: str  # the copy_group, or the table's name when it has none
    tables: tuple[str, ...]
    dest_tables: tuple[str, ...]
    conditions: tuple[str | None, ...]
    skip_truncate: tuple[bool, ...]
    max_parallel: int | None  # --max-parallel-copy: Spark tasks copying at once
    # Per table, its handler's column expressions (conditions include its row filter) and
    # the settings they read (may be secret: never shown).
    column_exprs: tuple[tuple[tuple[str, str], ...], ...] = ()
    excluded: tuple[tuple[str, ...], ...] = ()  # per table: columns its capture ignores
    settings: tuple[tuple[tuple[str, str], ...], ...] = field(default=(), repr=False)
    only: tuple[tuple[str, ...] | None, ...] = ()  # per table: the only columns copied
    copy_node: str | None = None  # --copy-node (a node name, or "?" to find one)
    # Per table: merged with other queues' parts (node/merge.py); skip_truncate is then the
    # operator's --skip-truncate, and the copy adds that it truncates only as the first part.
    merged: tuple[bool, ...] = ()


def pending_groups(
    conn: psycopg.Connection, queue: str, handlers: HandlerContext, *, combined: bool
) -> list[CopyGroup]:
    """Groups of tables waiting for their copy (state NULL, or ``in-copy`` after a crash),
    oldest first; ``combined``: the node merges its queue into another."""
    groups: dict[str, list[copystate.WaitingCopy]] = {}
    for table in copystate.waiting_copies(conn, queue, combined=combined):
        groups.setdefault(table.group_id, []).append(table)
    result = []
    for group_id, members in groups.items():
        caps = [m.max_parallel_copy for m in members if m.max_parallel_copy]
        # Their handlers.
        hs = [handler_registry.from_attrs(m.table_attrs, handlers) for m in members]
        # The capture's when= filters the copy too; its ignored columns are not copied.
        specs = [capture.copy_filter(m.copy_condition, m.table_attrs) for m in members]
        filters = [conjunction(f[0], h.row_filter()) for f, h in zip(specs, hs, strict=True)]
        result.append(
            CopyGroup(
                group_id=group_id,
                tables=tuple(m.table_name for m in members),
                dest_tables=tuple(m.dest_table for m in members),
                conditions=tuple(filters),
                skip_truncate=tuple(
                    bool(m.table_attrs.get("skip_truncate") if m.merged else m.skip_truncate)
                    for m in members
                ),
                max_parallel=min(caps) if caps else None,
                column_exprs=tuple(tuple(h.copy_column_exprs().items()) for h in hs),
                excluded=tuple(f[1] for f in specs),
                settings=tuple(tuple(h.copy_settings().items()) for h in hs),
                only=tuple(None if (o := h.copy_columns()) is None else tuple(o) for h in hs),
                # One command chose it for the whole group (add-table, resync).
                copy_node=next(
                    (
                        m.table_attrs.get("copy_node")
                        for m in members
                        if m.table_attrs.get("copy_node")
                    ),
                    None,
                ),  # fmt: skip
                merged=tuple(m.merged for m in members),
            )
        )
    return result


# --- catching up, in the loop -------------------------------------------------------------


def record_catchup(conn: psycopg.Connection, queue: str, group: CatchUp, tick: int) -> None:
    """Record ``tick`` as the group's position, in the transaction that applied its batch;
    refuse when the position moved meanwhile (another applier)."""
    rows = copystate.move_catchup_tick(conn, queue, group.consumer, group.tick, tick)
    if rows != len(group.tables):
        raise PgferryError(
            f"copy position of {', '.join(group.tables)} moved while applying: batch discarded"
        )


def join_main(conn: psycopg.Connection, queue: str, group: CatchUp) -> None:
    """The group has reached the main stream's tick: the main stream takes it over."""
    copystate.finish_catchup(conn, queue, group.consumer)


def pass_snapshot(
    conn: psycopg.Connection, queue: str, group: CatchUp, tick_snapshot: str | None
) -> bool:
    """After the group applied a tick whose snapshot is ``tick_snapshot`` (of the queue it
    reads): clear the copy snapshots that lie wholly before it, as :func:`clear_snapshots`
    does for the main stream.  True when the group filters nothing any more."""
    if tick_snapshot is None:
        return not group.filtered
    return copystate.clear_group_snapshots(conn, queue, group.consumer, tick_snapshot) == 0


def drop_consumer(source: psycopg.Connection, queue: str, consumer: str) -> None:
    """Unregister a group's consumer on the provider, or the upstream node whose queue it
    read (it holds events back from rotation there)."""
    with contextlib.suppress(QueueError, psycopg.Error), source.transaction():
        queue_api.unregister_consumer(source, queue, consumer)


def forget_stale_consumers(
    local: psycopg.Connection,
    source: psycopg.Connection,
    queue: str,
    main_consumer: str,
    node_name: str | None = None,
) -> list[str]:
    """Group consumers on the provider (or, with ``node_name``, this node's on an upstream
    node) that no local table refers to any more (the table was removed or resynced
    meanwhile): unregistered, so they hold nothing back."""
    used = copystate.copy_consumers(local, queue)
    local.rollback()
    prefix = f"{main_consumer}.copy."
    stale = [c for c in queue_api.consumers(source, queue) if c.startswith(prefix)]
    if node_name is not None:  # there, other nodes' consumers may share our job name
        stale = [c for c in stale if c.endswith(f"@{node_name}")]
    stale = [c for c in stale if c not in used]
    for consumer in stale:
        drop_consumer(source, queue, consumer)
    return stale


def tick_now(provider: psycopg.Connection, queue: str) -> None:
    """A tick on the provider's queue after the copy: the hand-over needs no idle tick.

    The tick is made here when the provider ticks its queue itself: waiting for the
    ticker's next round would add up to ``ticker_period``.  The queue row lock orders it
    with the ticker's own ticks.  Otherwise (a branch mirrors its provider's ticks, a paused
    ticker, no right to tick) the forced tick comes with the next tick the queue gets.
    """
    for step in (queue_ticks.force_tick, queue_ticks.tick_if_own_ticker):
        with contextlib.suppress(psycopg.Error), provider.transaction():
            step(provider, queue)


def clear_snapshots(conn: psycopg.Connection, queue: str, tick_snapshot: str | None) -> list[str]:
    """Tables whose copy snapshot lies wholly before ``tick_snapshot`` need no filter any
    more: no event visible in it can come in a later batch."""
    if tick_snapshot is None:
        return []
    return copystate.clear_snapshots(conn, queue, tick_snapshot)
