"""Reconciling a subscriber with a provider that failed over to a standby lacking ticks
this node had applied (a diverged provider, :class:`~pgferry.errors.DivergedProvider`).

Every batch of the node's own stream records its tick (id and the provider's time of it)
and the tables it changed in ``ferry_node.applied_tick``.  :func:`reconcile` walks those
records back to the newest tick the new provider holds under the same id and time: the last
tick both share.  The tables changed after it are the only ones that may differ beyond what
the new provider's later events bring.  It then, in one local transaction:

1. saves what the new provider lost: each row of those tables held here that the new
   provider lacks or holds otherwise, in ``ferry_node.lost_after_failover`` (the new
   provider's row beside, NULL when it has none);
2. records the common tick as the node's position; a branch also cuts its own queue back
   to it (the ticks after it were the old provider's: its subscribers reconcile the same
   way against the ticks it makes again);
3. puts exactly those tables back to copy from the new provider (the copy machinery repairs
   them at one snapshot and hands them over to replay).

Then the provider's position is moved to the common tick and replay goes on from there for
every other table.  ``failover_reconcile = stop`` leaves all of it to the DBA.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import sql

from pgferry.errors import DivergedProvider, NodeError
from pgferry.node import model
from pgferry.queue import api as queue_api
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import catalog, entries
from pgferry.registry.names import split_qualified

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reconciled:
    common_tick: int
    lost_tick: int
    tables: list[str]  # the tables put back to copy
    lost_rows: int  # rows saved in ferry_node.lost_after_failover


def common_tick(
    local: psycopg.Connection, provider: psycopg.Connection, queue: str, consumer: str
) -> tuple[int, datetime | None, set[str]] | None:
    """The newest tick applied here that the provider holds as the same tick, and the
    tables changed by the batches applied after it (None: no recorded tick is shared)."""
    marks = queue_ticks.tick_marks(provider, queue)
    touched: set[str] = set()
    for applied in model.applied_ticks(local, queue, consumer):
        mark = marks.get(applied.tick_id)
        if mark is not None and mark[0] == applied.tick_time:
            return applied.tick_id, applied.tick_time, touched
        touched |= set(applied.tables)
    return None


def reconcile(
    local: psycopg.Connection, provider: psycopg.Connection, node: model.NodeInfo
) -> Reconciled:
    """Bring this node back in step with its diverged provider (see the module's text)."""
    queue, consumer = node.queue_name, node.consumer_name
    lost_tick = node.last_tick_id
    assert lost_tick is not None
    # One transaction from the first read (the worker's node connection is not in
    # autocommit: a read before it would leave this block a savepoint never committed).
    with local.transaction():
        found = common_tick(local, provider, queue, consumer)
        if found is None:
            raise DivergedProvider(
                f"Diverged provider: no tick {consumer} applied (failover_history) is held by"
                " the provider: reposition with 'worker --reset', then resync this node's"
                " tables (resync --all)"
            )
        tick, tick_time, touched = found
        registered = {t.table_name: t for t in entries.list_tables(local, queue)}
        tables = sorted(t for t in touched if t in registered)
        _provider_settled(provider, queue, tables)
        lost = 0
        for table in tables:
            lost += _save_lost(
                local, provider, queue, node.provider_node, table, registered[table].dest_name,
                tick, lost_tick,
            )  # fmt: skip
        model.set_position(local, queue, consumer, tick, tick_time)
        model.forget_applied_after(local, queue, consumer, tick)
        if node.node_type == "branch":
            _cut_queue(local, queue, tick)
        if tables:
            entries.resync_tables(local, queue, tables)
    queue_api.rewind(provider, queue, consumer, tick)
    log.warning(
        "Diverged provider: %s applied up to tick %s, the provider holds ticks this node"
        " applied up to %s only: repositioned there, %d rows the provider lost saved in"
        " ferry_node.lost_after_failover, tables copied again: %s",
        consumer,
        lost_tick,
        tick,
        lost,
        ", ".join(tables) or "none",
    )
    return Reconciled(tick, lost_tick, tables, lost)


def _provider_settled(provider: psycopg.Connection, queue: str, tables: list[str]) -> None:
    """A provider that is a branch reconciling with its own provider copies the same tables
    again: until it holds them whole, what it lacks is not known.  NodeError: retry."""
    copying = entries.not_settled(provider, queue, tables)
    if copying:
        raise NodeError(
            f"Diverged provider: waiting for the provider to copy {', '.join(copying)} again first"
            " (its own failover reconcile)"
        )


def _cut_queue(local: psycopg.Connection, queue: str, tick: int) -> None:
    """A branch's queue cut back to ``tick``: the later ticks were the old provider's.  Its
    consumers that stood past it are put there; each subscriber then finds its own last
    common tick with this branch, as this node did with its provider."""
    past = [
        info["consumer_name"]
        for info in queue_api.consumer_info(local, queue)
        if info["last_tick"] is not None and info["last_tick"] > tick
    ]  # read before the cut: the consumers' info joins their ticks
    queue_ticks.cut_after(local, queue, tick)
    for consumer in past:
        queue_api.rewind(local, queue, consumer, tick)


def _save_lost(
    local: psycopg.Connection,
    provider: psycopg.Connection,
    queue: str,
    provider_node: str | None,
    table: str,
    dest: str,
    common: int,
    lost_tick: int,
) -> int:
    """Rows of ``dest`` here that ``table`` on the provider lacks or holds otherwise, saved
    in ferry_node.lost_after_failover; their count.  The provider's rows are read as a
    digest per key (its side is read once, whole), then in full for the rows that differ."""
    key = catalog.primary_key(local, dest)
    if not key:
        return 0  # no key to match rows by: the copy repairs the table, nothing is listed
    dest_id = sql.Identifier(*split_qualified(dest))
    source_id = sql.Identifier(*split_qualified(table))
    key_row = sql.SQL("row({})::text").format(sql.SQL(", ").join(map(sql.Identifier, key)))
    digests = sql.SQL("select {}, md5(to_jsonb(t)::text) from {} t")
    theirs: dict[str, str] = dict(provider.execute(digests.format(key_row, source_id)).fetchall())
    ours = local.execute(
        sql.SQL("select {}, md5(to_jsonb(t)::text), to_jsonb(t)::text from {} t").format(
            key_row, dest_id
        )
    ).fetchall()
    differ = [(k, row) for k, digest, row in ours if theirs.get(k) != digest]
    if not differ:
        return 0
    present = [k for k, _ in differ if k in theirs]
    on_provider: dict[str, str] = {}
    if present:
        on_provider = dict(
            provider.execute(
                sql.SQL("select {0}, to_jsonb(t)::text from {1} t where {0} = any(%s)").format(
                    key_row, source_id
                ),
                (present,),
            ).fetchall()
        )
    lost = [model.LostRow(k, row, on_provider.get(k)) for k, row in differ]
    model.save_lost(local, queue, provider_node, table, common, lost_tick, lost)
    return len(differ)
