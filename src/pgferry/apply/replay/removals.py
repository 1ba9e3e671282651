"""Tables and sequences the provider removed, detached in a batch's apply transaction.

A removal on a root or branch travels down as an event (:mod:`pgferry.node.tableops`
``remove_tables``); :mod:`.summary` reads those of a batch with its scripts, in one query
(:func:`.summary.read_summary`), and :mod:`.batch_end` calls :func:`apply_removals` after
every row of the batch.  The table's or sequence's registry row and triggers go; its rows
and values stay.  The provider's copy consumers that only a removed table needed are
returned, to be dropped after the commit (a consumer dropped before it would be missing if
the transaction rolled back).
"""

from __future__ import annotations

import logging

import psycopg

from pgferry.apply.replay.read import RemovalEvent
from pgferry.events import REMOVE_SEQ_EVENT
from pgferry.node import model, seqops, tableops
from pgferry.registry import copystate

log = logging.getLogger(__name__)


def apply_removals(
    local: psycopg.Connection, node: model.NodeInfo, removals: list[RemovalEvent]
) -> list[str]:
    """Detach what ``removals`` name; returns the copy consumers on the provider that only
    removed tables needed (dropped after the commit)."""
    queue = node.queue_name
    stale: list[str] = []
    for removal in removals:
        name = removal.name
        if not name:
            continue
        source = removal.origin or node.provider_node or "the provider"
        if removal.ev_type == REMOVE_SEQ_EVENT:
            if seqops.removed_upstream(local, queue, name):
                log.info("Sequence %s removed: %s no longer replicates it", name, source)
            continue
        # Read before the row goes: the provider consumers a copy of the table may hold
        # that no other table of the node copies or catches up through (the one recorded,
        # and the name CopyRun gives its group's, registered before it is recorded); none
        # for a table in state ok (its copy's consumer went at the hand-over).
        unused = copystate.unused_copy_consumers(local, queue, name, f"{node.consumer_name}.copy.")
        entry = tableops.removed_upstream(local, queue, name)
        if entry is None:
            continue  # never added here, or removed here already
        state = entry.merge_state or "waiting for its copy"
        log.info(
            "Table %s removed: %s no longer replicates it (was %s; its rows stay)",
            name,
            source,
            state,
        )
        stale += unused
    return stale
