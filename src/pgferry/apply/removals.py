"""Tables and sequences the provider removed, detached in a batch's apply transaction.

A removal on a root or branch travels down as an event (:mod:`pgferry.node.tableops`
``remove_tables``); :mod:`.batch` reads those of a batch (:func:`.read.read_removals`) and
calls :func:`apply_removals` after every row of the batch.  The table's or sequence's
registry row and triggers go; its rows and values stay.  The provider's copy consumers
that only a removed table needed are returned, to be dropped after the commit (a consumer
dropped before it would be missing if the transaction rolled back).
"""

from __future__ import annotations

import logging

import psycopg

from pgferry.apply.read import RemovalEvent
from pgferry.events import REMOVE_SEQ_EVENT
from pgferry.node import model, seqops, tableops

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
        unused = _unused_copy_consumers(local, node, name)  # read before the row goes
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


def _unused_copy_consumers(
    local: psycopg.Connection, node: model.NodeInfo, table: str
) -> list[str]:
    """The provider consumers a copy of ``table`` may hold that no other table of the node
    copies or catches up through: the one recorded, and the name
    :class:`~pgferry.apply.copyrun.CopyRun` gives its group's (registered before it is
    recorded).  None for a table in state ok: its copy's consumer went at the hand-over."""
    rows = local.execute(
        """
        select distinct c.name
          from ferry.table_info t
         cross join lateral unnest(array[t.copy_consumer,
                                         %s || coalesce(t.copy_group::text, t.table_name)])
               as c(name)
         where t.queue_name = %s and t.table_name = %s and t.merge_state is distinct from 'ok'
           and c.name is not null
           and not exists (select 1 from ferry.table_info o
                            where o.queue_name = t.queue_name and o.local
                              and o.table_name <> t.table_name
                              and (o.copy_consumer = c.name
                                   or (coalesce(o.copy_group::text, o.table_name)
                                       = coalesce(t.copy_group::text, t.table_name)
                                       and o.merge_state is distinct from 'ok')))
        """,
        (f"{node.consumer_name}.copy.", node.queue_name, table),
    ).fetchall()
    return [r[0] for r in rows]
