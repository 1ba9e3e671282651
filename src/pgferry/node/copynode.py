"""Where an initial copy reads from: the provider, or another node (``--copy-node``,
``--find-copy-node``).

A table can be copied from any node of the cascade that holds it whole (under its own name,
without a copy condition, with a handler that keeps its rows) and in state ok.  How the
copied group then catches up with its events depends on where that node stands:

* :data:`PROVIDER`: the provider itself, as without the option.
* :data:`UPSTREAM`: a node on the path from the provider up to the root.  The group's
  consumer is registered on that node's queue before the copy's snapshot is taken there and
  catches up from that queue; its ticks include every tick of the provider's queue (a
  branch makes exactly the ticks it applied), so the group can meet the main stream at the
  main stream's tick.
* :data:`BESIDE`: a subscriber of this node's provider (a sibling, leaf or branch), or any
  other node when the provider is the root.  Replay records a node's tick in the
  transaction that applies its rows, so the copy's snapshot holds that node's data as of the
  tick it last applied, exactly; the group's consumer starts at that tick on the
  provider's queue, which holds it.

Any other node (below this one, or beside an upstream branch) shares no tick with this
node's provider that the group could be sure to meet at, and is refused.
``--find-copy-node`` (:data:`FIND`) takes the first node from the provider upwards that
holds the tables ok; reaching the root without one is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from pgferry.config import Config
from pgferry.db import connect
from pgferry.errors import DatabaseError, NodeError, TableError, UsageError
from pgferry.handlers import registry as handler_registry
from pgferry.node import model
from pgferry.node.connect import remote_connstr
from pgferry.registry import entries

FIND = "?"  # table_attrs.copy_node of --find-copy-node, as in the original
PROVIDER, UPSTREAM, BESIDE = "provider", "upstream", "beside"
CONNECT_TIMEOUT = 10  # seconds: an unreachable node is one error, not a hang


@dataclass(frozen=True)
class CopySource:
    """The node a group is copied from, and how its events are caught up."""

    node_name: str
    dsn: str
    mode: str  # PROVIDER, UPSTREAM or BESIDE
    not_ready: tuple[str, ...] = ()  # tables it does not hold ok (yet)


@dataclass(frozen=True)
class _Peer:
    name: str
    dsn: str
    info: model.NodeInfo
    not_ready: tuple[str, ...]


def dsn_of(config: Config) -> Callable[[str], str]:
    """A member's location -> the connection string this node uses for it."""
    return lambda location: remote_connstr(config, location)


def not_ready(conn: psycopg.Connection, queue: str, tables: list[str]) -> list[str]:
    """Tables that the node on ``conn`` cannot serve a copy of: not local, not ok, renamed
    or filtered there, or applied by a handler that keeps no rows of it."""
    whole = {
        e.table_name
        for e in entries.list_tables(conn, queue)
        if e.table_name in tables and e.merge_state == "ok" and e.dest_table is None
        and e.copy_condition is None and handler_registry.stores_rows(e.table_attrs or {})
    }  # fmt: skip
    return [t for t in tables if t not in whole]


def _visit(dsn: str, name: str, queue: str, tables: list[str]) -> _Peer:
    try:
        with connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            info = model.load_node(conn, queue)
            missing = not_ready(conn, queue, tables) if info is not None else []
    except (psycopg.Error, DatabaseError) as exc:
        raise NodeError(f"Node {name} cannot be reached: {exc}") from None
    if info is None or info.node_name != name:
        raise NodeError(f"Node {name} is not a node of queue {queue}")
    return _Peer(name, dsn, info, tuple(missing))


def upstream(
    dsn_of: Callable[[str], str], node: model.NodeInfo, tables: list[str], stop: str | None = None
) -> list[_Peer]:
    """The provider, its provider and so on up to the root (or up to ``stop``)."""
    path: list[_Peer] = []
    name, location = node.provider_node, node.provider_location
    seen = {node.node_name}
    while name and location and name not in seen:
        seen.add(name)
        peer = _visit(dsn_of(location), name, node.queue_name, tables)
        path.append(peer)
        if name == stop:
            break
        name, location = peer.info.provider_node, peer.info.provider_location
    return path


def choose(
    dsn_of: Callable[[str], str],
    local: psycopg.Connection,
    node: model.NodeInfo,
    tables: list[str],
    choice: str,
) -> CopySource:
    """The copy source for ``choice`` (a node name or :data:`FIND`); its ``not_ready``
    lists the tables it does not hold ok now (the worker waits, add-table refuses).

    Raises for a node that is not a member, is dead, is this node, is not a node of the
    queue, or stands where the group could not meet the main stream; with FIND when no node
    up to the root holds every table ok.
    """
    queue = node.queue_name
    if choice == FIND:
        for rank, peer in enumerate(upstream(dsn_of, node, tables)):
            if not peer.not_ready:
                return CopySource(peer.name, peer.dsn, UPSTREAM if rank else PROVIDER)
        raise TableError(
            f"No node from the provider up to the root holds {', '.join(tables)} ok"
            " (--find-copy-node)"
        )
    if choice == node.node_name:
        raise UsageError(f"Copy node {choice} is this node")
    members = {m.node_name: m for m in model.members(local, queue)}
    member = members.get(choice)
    if member is None:
        raise NodeError(f"Copy node not found: {choice} (not a member of queue {queue})")
    if member.dead:
        raise NodeError(f"Copy node {choice} is tagged dead")
    path = upstream(dsn_of, node, tables, stop=choice)
    for rank, peer in enumerate(path):
        if peer.name == choice:
            mode = UPSTREAM if rank else PROVIDER
            return CopySource(peer.name, peer.dsn, mode, peer.not_ready)
    peer = _visit(dsn_of(member.node_location), choice, queue, tables)
    provider = path[0] if path else None
    if peer.info.provider_node == node.node_name:
        raise NodeError(f"Copy node {choice} is a subscriber of this node")
    if provider is not None and (peer.info.provider_node == provider.name or provider.info.is_root):
        return CopySource(peer.name, peer.dsn, BESIDE, peer.not_ready)
    raise NodeError(
        f"Copy node {choice} is neither upstream of this node nor a subscriber of its"
        f" provider {node.provider_node}"
    )


def check(
    dsn_of: Callable[[str], str],
    local: psycopg.Connection,
    node: model.NodeInfo,
    tables: list[str],
    choice: str,
) -> CopySource:
    """:func:`choose` for add-table and resync: the node must hold the tables ok now."""
    source = choose(dsn_of, local, node, tables, choice)
    if source.not_ready:
        raise TableError(
            f"Table {', '.join(source.not_ready)} not ok on copy node {source.node_name}"
            " (it must hold the table whole, in state ok)"
        )
    return source


def last_tick_in_snapshot(conn: psycopg.Connection, queue: str) -> int | None:
    """The tick the node on ``conn`` had applied, as the transaction's snapshot sees it."""
    row = conn.execute(
        """
        select s.last_tick_id from ferry_node.node_info n
          join ferry_node.local_state s
            on s.queue_name = n.queue_name and s.consumer_name = n.worker_name
         where n.queue_name = %s
        """,
        (queue,),
    ).fetchone()
    return None if row is None else row[0]
