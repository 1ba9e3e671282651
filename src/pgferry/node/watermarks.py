"""Watermarks: every queue keeps what any node of the cascade may still need.

Up: each branch or leaf reports to its provider the lowest tick its subtree still needs
(its local watermark: its subscribers' positions and the watermarks they reported, or a
leaf's own position).  The provider holds it as ``.<node>.watermark``, a position on its
queue that rotation respects like a consumer that never reads, so the root keeps what the
whole cascade needs.  Down: a branch copies its provider's global watermark (the root's
lowest position of all) into a ``.global_watermark`` hold, so any live member can serve any
other after ``change-provider``.  The SQL side is ``sql/node/functions/``.

``--sync-watermark=A,B`` (node attr ``sync_watermark``) is for branches that may take each
other's subscribers: such a branch reports only its own position upstream and keeps, for
its subtree, the lowest local watermark of itself and the listed live nodes (never more
than the global watermark allows).

The worker calls :func:`publish` every few seconds; it costs three short statements (one
more per peer with ``sync_watermark``) and writes only when a watermark moved.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, urlencode

import psycopg

from pgferry import db
from pgferry.config import Config
from pgferry.db import error_text
from pgferry.errors import DatabaseError
from pgferry.node import connect

log = logging.getLogger(__name__)

SYNC_ATTR = "sync_watermark"
PEER_TIMEOUT = 5  # seconds: an unreachable peer must not stall the worker for long


def hold_name(node: str) -> str:
    """The hold a provider keeps for subscriber ``node``'s watermark."""
    return f".{node}.watermark"


def gravestone_name(node: str) -> str:
    """The hold a new root may keep where a failed-over root ``node`` left the cascade."""
    return f".{node}.gravestone"


# --- node attributes -----------------------------------------------------------------------
def parse_sync_nodes(text: str | None) -> tuple[str, ...]:
    """``A,B`` -> ("A", "B"); empty names are refused."""
    names = tuple(part.strip() for part in (text or "").split(","))
    if not names or any(not name or any(ch.isspace() for ch in name) for name in names):
        raise ValueError(f"bad node list: {text!r} (expected NODE[,NODE...])")
    return names


def attrs_text(sync_nodes: tuple[str, ...]) -> str | None:
    """``node_info.node_attrs`` (url-encoded, as the original's) for a create command."""
    return urlencode({SYNC_ATTR: ",".join(sync_nodes)}) if sync_nodes else None


def sync_nodes(attrs: str | None) -> tuple[str, ...]:
    """The ``sync_watermark`` node list in ``node_attrs`` (empty when not set)."""
    value = dict(parse_qsl(attrs or "")).get(SYNC_ATTR, "")
    return tuple(name for name in (n.strip() for n in value.split(",")) if name)


# --- reading and placing -------------------------------------------------------------------
def local_watermark(conn: psycopg.Connection, queue: str) -> int | None:
    """The lowest tick this node's subtree still needs (a leaf: its own position)."""
    row = conn.execute("select ferry_node.local_watermark(%s)", (queue,)).fetchone()
    return None if row is None else row[0]


def upstream_watermark(conn: psycopg.Connection, queue: str) -> int | None:
    """What this node reports to its provider: its local watermark, or with
    ``sync_watermark`` its own position only (its peers keep what its subtree needs)."""
    row = conn.execute(
        """
        select n.node_attrs, s.last_tick_id, ferry_node.local_watermark(n.queue_name)
          from ferry_node.node_info n
          left join ferry_node.local_state s
                 on s.queue_name = n.queue_name and s.consumer_name = n.worker_name
         where n.queue_name = %s
        """,
        (queue,),
    ).fetchone()
    if row is None:
        return None
    return row[1] if sync_nodes(row[0]) else row[2]


def hold_subscriber(conn: psycopg.Connection, queue: str, node: str, tick: int) -> int | None:
    """On a provider: keep what subscriber ``node`` reported; the tick held, or None when
    ``node`` is not (any more) a subscriber there."""
    row = conn.execute(
        "select ferry_node.set_subscriber_watermark(%s, %s, %s)", (queue, node, tick)
    ).fetchone()
    return None if row is None else row[0]


def supported(conn: psycopg.Connection) -> bool:
    """Whether the database's schema has watermarks (``pgferry install`` brings them)."""
    row = conn.execute(
        "select to_regprocedure('ferry_node.drop_watermark(text, text)') is not null"
    ).fetchone()
    return bool(row and row[0])


def release_subscriber(conn: psycopg.Connection, queue: str, node: str) -> None:
    """On a former provider: forget the holds kept for ``node`` (no error when none, nor
    on a database whose schema predates watermarks: it cannot hold any)."""
    if supported(conn):
        conn.execute("select ferry_node.drop_watermark(%s, %s)", (queue, node))


def global_watermark(conn: psycopg.Connection, queue: str) -> int | None:
    """What the node of ``conn`` keeps for the whole cascade (None on a leaf)."""
    row = conn.execute("select ferry_node.global_watermark(%s)", (queue,)).fetchone()
    return None if row is None else row[0]


# --- the worker's call ---------------------------------------------------------------------
def publish(
    local: psycopg.Connection,
    provider: psycopg.Connection | None,
    queue: str,
    node_name: str,
    *,
    config: Config | None = None,
) -> int | None:
    """Report this node's watermark to its provider and take the global one from it.

    Returns the tick now held for this node on the provider, or None when nothing was
    published (a root, a node without position or provider, an error: logged, never
    raised, so the worker's loop goes on).  Call it outside a transaction on ``local``;
    each step commits on its own.  ``config`` gives ``remote_extra_connstr`` for the
    peers of a ``sync_watermark`` branch.  On a root (``provider`` None) it only drops a
    ``.global_watermark`` hold left from the node's days as a branch.
    """
    try:
        with local.transaction():
            row = local.execute(
                """
                select n.node_type, n.node_attrs, s.last_tick_id, s.provider_node,
                       ferry_node.local_watermark(n.queue_name)
                  from ferry_node.node_info n
                  left join ferry_node.local_state s
                         on s.queue_name = n.queue_name and s.consumer_name = n.worker_name
                 where n.queue_name = %s
                """,
                (queue,),
            ).fetchone()
            if row is not None and row[0] == "root":
                global_watermark(local, queue)  # drops a leftover hold
        if row is None or row[0] == "root" or provider is None or row[3] is None:
            return None
        node_type, attrs, own, _, low = row
        peers = sync_nodes(attrs) if node_type == "branch" else ()
        upstream = own if peers else low
        if upstream is None:
            return None
        with provider.transaction():
            held = hold_subscriber(provider, queue, node_name, upstream)
            above = global_watermark(provider, queue)
        if node_type == "branch" and above is not None:
            keep: int | None = above
            if peers:
                keep = _synced(local, queue, node_name, peers, low, above, config)
            if keep is not None:
                with local.transaction():
                    local.execute("select ferry_node.set_global_watermark(%s, %s)", (queue, keep))
        return held
    except psycopg.Error as exc:
        log.warning("watermark of node %s not published: %s", node_name, error_text(exc))
        return None


def _synced(
    local: psycopg.Connection,
    queue: str,
    me: str,
    peers: tuple[str, ...],
    low: int | None,
    above: int,
    config: Config | None,
) -> int | None:
    """The lowest local watermark of this branch and its live peers, at most ``above``;
    None (leave the hold as it is) when a listed live peer cannot tell its own."""
    with local.transaction():
        rows = local.execute(
            "select node_name, node_location, dead from ferry_node.node_location"
            " where queue_name = %s",
            (queue,),
        ).fetchall()
    members = {r[0]: (r[1], r[2]) for r in rows}
    lowest = min(t for t in (low, above) if t is not None)
    for peer in peers:
        if peer == me:
            continue
        if peer not in members:
            # A cluster being set up: keeping less for a peer that is not there yet could
            # lose what it will need, so nothing moves until it is.
            log.warning("Unknown node in sync_watermark list: %s", peer)
            return None
        location, dead = members[peer]
        if dead:
            continue
        dsn = connect.remote_connstr(config, location) if config is not None else location
        try:
            with db.connect(dsn, autocommit=True, connect_timeout=PEER_TIMEOUT) as conn:
                theirs = local_watermark(conn, queue)
        except DatabaseError as exc:
            log.warning("sync_watermark peer %s not reachable: %s", peer, exc)
            return None
        except psycopg.Error as exc:
            log.warning("sync_watermark peer %s did not answer: %s", peer, error_text(exc))
            return None
        if theirs is not None and theirs < lowest:
            lowest = theirs
    return lowest
