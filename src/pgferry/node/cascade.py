"""Cascade operations on named members: pause/resume, tag-dead/alive and drop-node.

:class:`Cascade` is the local node's view of the member list: it resolves a node name to a
connect string (the local node through ``db``, the others through their public location
plus ``remote_extra_connstr``), knows which members are dead, and :meth:`Cascade.survey`
asks every live member who it is and where it reads from.  The other cascade modules
(:mod:`.provider`, :mod:`.takeover`, :mod:`.waits`) build on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from pgferry import db, schema
from pgferry.config import Config
from pgferry.db import error_text
from pgferry.errors import DatabaseError, NodeError, PgferryError
from pgferry.node import capture, connect, model, watermarks
from pgferry.queue import api as queue_api
from pgferry.registry import entries

log = logging.getLogger(__name__)

# Other members get a short connect timeout: a dead host must not hang a command.
REMOTE_TIMEOUT = 5


@dataclass
class NodeView:
    """What a live member says about itself."""

    name: str
    node_type: str
    worker_name: str
    provider: str | None
    last_tick: int | None
    paused: bool
    subscribers: list[tuple[str, str]] = field(default_factory=list)
    last_tick_time: datetime | None = None  # the provider's time of last_tick


@dataclass
class Cascade:
    """The local node and the member list it holds."""

    config: Config
    queue: str
    local: model.NodeInfo
    members: dict[str, model.Member]
    assume_dead: frozenset[str] = frozenset()

    # --- names and connections -----------------------------------------------------------
    def member(self, name: str) -> model.Member:
        found = self.members.get(name)
        if found is None:
            raise NodeError(f"Unknown node: {name}")
        return found

    def is_dead(self, name: str) -> bool:
        return name in self.assume_dead or self.member(name).dead

    def live_names(self) -> list[str]:
        return [n for n in self.members if not self.is_dead(n)]

    def connstr(self, name: str) -> str:
        if name == self.local.node_name:
            return connect.local_connstr(self.config)
        return connect.remote_connstr(self.config, self.member(name).node_location)

    @contextmanager
    def on(self, name: str, **kwargs) -> Iterator[psycopg.Connection]:
        """A connection to member ``name``: committed on success; errors name the node."""
        self.member(name)
        if name != self.local.node_name:
            kwargs.setdefault("connect_timeout", REMOTE_TIMEOUT)
        try:
            conn = db.connect(self.connstr(name), **kwargs)
        except DatabaseError as exc:
            raise DatabaseError(f"node {name}: {exc}") from None
        try:
            with conn:
                yield conn
        except psycopg.Error as exc:
            raise DatabaseError(f"node {name}: {error_text(exc)}") from None

    # --- what the members say ------------------------------------------------------------
    def view(self, name: str) -> NodeView:
        """Ask ``name`` about itself (raises when it is unreachable or not a node)."""
        with self.on(name, autocommit=True) as conn:
            return read_view(conn, self.queue, name)

    def survey(self, skip: frozenset[str] = frozenset()) -> dict[str, NodeView]:
        """Views of every live member that answers; the others are logged and left out."""
        views: dict[str, NodeView] = {}
        for name in self.live_names():
            if name in skip:
                continue
            try:
                views[name] = self.view(name)
            except PgferryError as exc:
                log.warning("node %s not reachable: %s", name, exc)
        return views


def read_view(conn: psycopg.Connection, queue: str, name: str) -> NodeView:
    node = model.load_node(conn, queue)
    if node is None:
        raise NodeError(f"Node {name} is not initialized for queue {queue}")
    state = model.local_state(conn, queue, node.worker_name)
    return NodeView(
        name=node.node_name,
        node_type=node.node_type,
        worker_name=node.worker_name,
        provider=node.provider_node,
        last_tick=state.last_tick_id if state else None,
        paused=bool(state and state.paused),
        subscribers=model.subscribers(conn, queue),
        last_tick_time=state.last_tick_time if state else None,
    )


def load(config: Config, assume_dead: frozenset[str] = frozenset()) -> Cascade:
    """The local node and its member list (``Node not initialized`` when it is none)."""
    queue = connect.queue_name(config)
    try:
        with connect.connect_local(config, autocommit=True) as conn:
            local = model.require_node(conn, queue)
            members = {m.node_name: m for m in model.members(conn, queue)}
    except psycopg.Error as exc:
        raise DatabaseError(error_text(exc)) from None
    cascade = Cascade(config, queue, local, members, frozenset(assume_dead))
    for name in assume_dead:
        cascade.member(name)
    return cascade


# --- pause / resume ------------------------------------------------------------------------
def set_paused(c: Cascade, name: str, paused: bool) -> bool:
    """Set (or clear) ``paused`` on node ``name``; False when it already was so.

    Once a pause has committed the worker cannot move that node's position any more
    (``ferry_node.local_state_guard``), whether it is running or not.
    """
    if c.is_dead(name):
        raise NodeError(f"Node {name} is marked dead")
    with c.on(name) as conn:
        schema.install(conn, ("node",))  # the pause guard of older installations
        node = model.load_node(conn, c.queue)
        if node is None:
            raise NodeError(f"Node {name} is not initialized for queue {c.queue}")
        row = conn.execute(
            """
            select paused from ferry_node.local_state
             where queue_name = %s and consumer_name = %s for update
            """,
            (c.queue, node.worker_name),
        ).fetchone()
        if row is None:
            raise NodeError(f"Node {name} has no worker state")
        if row[0] == paused:
            return False
        conn.execute(
            """
            update ferry_node.local_state set paused = %s
             where queue_name = %s and consumer_name = %s
            """,
            (paused, c.queue, node.worker_name),
        )
    log.info("Node %s %s", name, "paused" if paused else "resumed")
    return True


def worker_acknowledged(c: Cascade, name: str) -> bool:
    """True once the worker of ``name`` has written its state since the last pause/resume."""
    with c.on(name, autocommit=True) as conn:
        node = model.require_node(conn, c.queue)
        state = model.local_state(conn, c.queue, node.worker_name)
    return bool(state and state.uptodate)


# --- tag-dead / tag-alive ------------------------------------------------------------------
def tag(c: Cascade, name: str, dead: bool) -> list[str]:
    """Write ``dead`` for ``name`` on the local node and every other live member.

    Returns the members that could not be told (logged as warnings).
    """
    c.member(name)
    if dead and name == c.local.node_name:
        raise NodeError(f"Cannot tag the local node dead: {name}")
    targets = [n for n in c.live_names() if n != name]
    if not dead and name not in c.assume_dead:
        targets.append(name)  # a node coming back learns it is alive again
    failed: list[str] = []
    for other in targets:
        try:
            with c.on(other) as conn:
                conn.execute(
                    """
                    update ferry_node.node_location set dead = %s
                     where queue_name = %s and node_name = %s
                    """,
                    (dead, c.queue, name),
                )
        except PgferryError as exc:
            if other == c.local.node_name:
                raise
            log.warning("could not tag %s on node %s: %s", name, other, exc)
            failed.append(other)
    c.members[name].dead = dead
    log.info("Node %s tagged %s", name, "dead" if dead else "alive")
    return failed


# --- drop-node -----------------------------------------------------------------------------
def drop_node(c: Cascade, name: str) -> None:
    """Remove ``name`` from the cascade: its consumer on its provider, its location on every
    live member and, when it answers, its own node bookkeeping.

    Refused while any live member still reads from it.
    """
    c.member(name)
    views = c.survey()
    below = sorted(v.name for v in views.values() if v.provider == name and v.name != name)
    target = views.get(name)
    if target is not None:
        below = sorted(set(below) | {s for s, _ in target.subscribers})
    if below:
        raise NodeError(f"Node {name} still has subscribers: {', '.join(below)}")
    provider, worker = _provider_of(views, name)
    if provider is not None and not c.is_dead(provider) and provider not in views:
        raise NodeError(f"Provider {provider} of node {name} is not reachable (tag it dead?)")

    if provider is not None and provider in views:
        with c.on(provider) as conn:
            unregister_subscriber(conn, c.queue, name, worker)
    elif provider is not None:
        log.warning("provider %s of node %s is dead: its consumer is left there", provider, name)
    if target is not None:
        with c.on(name) as conn:
            drop_bookkeeping(conn, c.queue)
    elif name != c.local.node_name:
        log.warning("node %s is not reachable: its own bookkeeping is left there", name)
    for other in views:
        if other == name:
            continue
        try:
            with c.on(other) as conn:
                conn.execute(
                    "delete from ferry_node.node_location where queue_name = %s and node_name = %s",
                    (c.queue, name),
                )
                if views[other].node_type != "leaf":
                    # A hold kept for the node elsewhere (a gravestone on a new root).
                    watermarks.release_subscriber(conn, c.queue, name)
        except PgferryError as exc:
            log.warning("could not remove %s on node %s: %s", name, other, exc)
    log.info("Node %s dropped", name)


def _provider_of(views: dict[str, NodeView], name: str) -> tuple[str | None, str | None]:
    """(provider, worker name) of ``name``: from itself, else from who lists it."""
    own = views.get(name)
    if own is not None:
        return own.provider, own.worker_name
    for view in views.values():
        for sub, worker in view.subscribers:
            if sub == name:
                return view.name, worker
    return None, None


def unregister_subscriber(
    conn: psycopg.Connection, queue: str, node: str, worker: str | None
) -> None:
    """Forget subscriber ``node`` on a provider: its consumer, its subscriber row and the
    watermark held for it (left behind, it would stop rotation there for good)."""
    row = conn.execute(
        "select worker_name from ferry_node.subscriber_info"
        " where queue_name = %s and subscriber_node = %s",
        (queue, node),
    ).fetchone()
    worker = row[0] if row else worker
    if worker is not None and queue_api.is_registered(conn, queue, worker):
        queue_api.unregister_consumer(conn, queue, worker)
    conn.execute(
        "delete from ferry_node.subscriber_info where queue_name = %s and subscriber_node = %s",
        (queue, node),
    )
    watermarks.release_subscriber(conn, queue, node)


def drop_bookkeeping(conn: psycopg.Connection, queue: str) -> None:
    """On the dropped node itself: triggers, registry, queue and node rows of ``queue``."""
    for entry in entries.list_tables(conn, queue):
        capture.detach(conn, queue, entry.dest_name)
    entries.forget_queue(conn, queue)  # with its requests and capture-ddl's switch
    conn.execute("delete from ferry_node.node_info where queue_name = %s", (queue,))
    conn.execute("delete from ferry_node.node_location where queue_name = %s", (queue,))
    if queue_api.queue_exists(conn, queue):
        queue_api.drop_queue(conn, queue, force=True)
