"""Creating cascade nodes: ``create-root``, ``create-branch`` and ``create-leaf``.

A subscriber is registered on its provider (location, queue consumer named after the
subscriber's job_name, subscriber_info row) and the provider's member list is copied to the
new node.  The provider's transaction commits just before the local one, so a failure at any
step before that leaves both databases untouched; the provider steps are idempotent, so
re-running after a late local failure completes the node.  A branch created with
``--sync-watermark`` records its node list in ``node_attrs`` (:mod:`.watermarks`); a leaf
created with ``--merge=SET`` records SET in ``combined_queue`` (:mod:`.merge`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from pgferry import schema, settings
from pgferry.config import Config
from pgferry.db import describe, error_text
from pgferry.errors import DatabaseError, NodeError, UsageError
from pgferry.node import connect, model, watermarks
from pgferry.queue import api as queue_api
from pgferry.queue import ticks as queue_ticks

log = logging.getLogger(__name__)

NODE_TYPES = ("root", "branch", "leaf")


@dataclass
class NodeRequest:
    """What a create-* command asks for, after ini fallbacks are applied."""

    node_type: str
    node_name: str
    public_location: str
    provider_location: str | None = None
    check_location: bool = True
    sync_watermark: tuple[str, ...] = ()  # branch: nodes whose watermarks it keeps in sync
    combined_queue: str | None = None  # leaf: the merged set it feeds (--merge)


def build_request(
    config: Config,
    node_type: str,
    node_name: str | None,
    public_location: str | None,
    provider_location: str | None,
    check_location: bool = True,
    sync_watermark: str | None = None,
    merge: str | None = None,
) -> NodeRequest:
    """Fill missing arguments from the ini (node_name, public_node_location,
    initial_provider_location), as the original does.  ``sync_watermark`` is a branch's
    ``NODE[,NODE...]`` (see :mod:`pgferry.node.watermarks`), ``merge`` a leaf's merged set
    (see :mod:`pgferry.node.merge`)."""
    if node_type not in NODE_TYPES:
        raise UsageError(f"unknown node type: {node_type}")
    sync_nodes: tuple[str, ...] = ()
    if sync_watermark is not None:
        if node_type != "branch":
            raise UsageError(f"create-{node_type}: --sync-watermark is for branch nodes")
        try:
            sync_nodes = watermarks.parse_sync_nodes(sync_watermark)
        except ValueError as exc:
            raise UsageError(f"create-branch: --sync-watermark: {exc}") from None
    if merge is not None:
        if node_type != "leaf":
            raise UsageError(f"create-{node_type}: --merge is for leaf nodes")
        if not merge.strip() or merge == config.get(settings.QUEUE_NAME):
            raise UsageError("create-leaf: --merge needs a name other than this node's queue")
    name = node_name or config.get(settings.NODE_NAME)
    if not name:
        raise UsageError(f"create-{node_type}: NODE name is required")
    location = (
        public_location or config.get(settings.PUBLIC_NODE_LOCATION) or config.get(settings.DB)
    )
    provider: str | None = provider_location or config.get(settings.INITIAL_PROVIDER_LOCATION)
    if node_type == "root" and provider:
        if provider_location:
            raise UsageError("create-root: a root node has no provider")
        provider = None
    if node_type != "root" and not provider:
        raise UsageError(f"create-{node_type}: --provider=CONNSTR is required")
    return NodeRequest(node_type, name, location, provider, check_location, sync_nodes, merge)


def create_node(config: Config, req: NodeRequest) -> bool:
    """Initialise the local database as a node; False when it already was one."""
    queue = connect.queue_name(config)
    worker = config.job_name
    log.info("Initializing node")
    with connect.connect_local(config) as conn:
        existing = model.load_node(conn, queue)
        if existing is not None:
            _already(existing, queue, req)
            return False
        if req.check_location:
            _check_public_location(config, conn, req.public_location)
        try:
            if req.node_type == "root":
                _create_root(conn, queue, worker, req)
            else:
                _create_subscriber(config, conn, queue, worker, req)
        except psycopg.Error as exc:
            raise DatabaseError(
                f"{describe(connect.local_connstr(config))}: {error_text(exc)}"
            ) from None
    log.info(
        'Node "%s" initialized for queue "%s" with type "%s"', req.node_name, queue, req.node_type
    )
    log.info("Done")
    return True


def _already(existing: model.NodeInfo, queue: str, req: NodeRequest) -> None:
    """A re-run on the same node is fine (nothing done, said so); a request for another
    node (type or name) is refused: the database is that node and stays it."""
    said = (
        f'Node "{existing.node_name}" already initialized for queue "{queue}"'
        f' with type "{existing.node_type}"'
    )
    if existing.node_type == req.node_type and existing.node_name == req.node_name:
        log.info("%s: nothing changed (location, provider and settings left as they are)", said)
        return
    raise NodeError(
        f'{said}: not made {req.node_type} "{req.node_name}"'
        f" (this database is that node; drop-node {existing.node_name} before making another)"
    )


def _check_public_location(config: Config, conn: psycopg.Connection, location: str) -> None:
    """The public connstr must reach this very database, or other nodes would go astray."""
    if location == connect.local_connstr(config):
        return
    with connect.connect_remote(config, location, autocommit=True) as pub:
        same = connect.database_identity(pub) == connect.database_identity(conn)
    conn.rollback()
    if not same:
        raise NodeError("Public connect string points to different database")


def _install(conn: psycopg.Connection) -> None:
    """queue, node and ferry schemas, brought up to date (logged by the installer)."""
    schema.install(conn, ("ferry",))


def _create_root(conn: psycopg.Connection, queue: str, worker: str, req: NodeRequest) -> None:
    with conn.transaction():
        _install(conn)
        if not queue_api.queue_exists(conn, queue):
            queue_api.create_queue(conn, queue)
        model.register_location(conn, queue, req.node_name, req.public_location)
        _insert_node(conn, queue, req, worker)
        tick_id, tick_time = queue_ticks.last_tick(conn, queue)
        _insert_state(conn, queue, worker, None, tick_id, tick_time)


def _create_subscriber(
    config: Config, conn: psycopg.Connection, queue: str, worker: str, req: NodeRequest
) -> None:
    assert req.provider_location is not None
    with connect.connect_remote(config, req.provider_location) as prov:
        provider = model.load_node(prov, queue)
        if provider is None:
            raise NodeError(
                f"Provider {describe(req.provider_location)} is not a node of queue {queue}"
            )
        if not provider.has_queue:
            raise NodeError(f"Provider node {provider.node_name} is a leaf: it has no queue")
        _check_names(prov, queue, req.node_name, worker)
        with conn.transaction():
            _install(conn)
            if req.node_type == "branch" and not queue_api.queue_exists(conn, queue):
                queue_api.create_queue(conn, queue)
                queue_api.set_external_ticker(conn, queue)
            with _provider_errors(req.provider_location), prov.transaction():
                model.register_location(prov, queue, req.node_name, req.public_location)
                queue_api.register_consumer(prov, queue, worker)
                prov.execute(
                    """
                    insert into ferry_node.subscriber_info
                        (queue_name, subscriber_node, worker_name)
                    values (%s, %s, %s)
                    on conflict (queue_name, subscriber_node)
                    do update set worker_name = excluded.worker_name
                    """,
                    (queue, req.node_name, worker),
                )
                tick_id, tick_time = queue_api.consumer_last_tick(prov, queue, worker)
                if tick_id is not None:  # the tick's own time: with the id, its identity
                    tick_time = queue_ticks.tick_time(prov, queue, tick_id) or tick_time
                provider_members = model.members(prov, queue)
            for member in provider_members:
                model.register_location(
                    conn, queue, member.node_name, member.node_location, member.dead
                )
            _insert_node(conn, queue, req, worker)
            _insert_state(conn, queue, worker, provider.node_name, tick_id, tick_time)
        # Leaving this block commits the provider's side; the caller then commits ours.
    _announce(config, queue, req, provider.node_name, provider_members)


@contextmanager
def _provider_errors(location: str) -> Iterator[None]:
    """Name the provider, not the local database, when a provider statement fails."""
    try:
        yield
    except psycopg.Error as exc:
        raise DatabaseError(f"provider {describe(location)}: {error_text(exc)}") from None


def _check_names(prov: psycopg.Connection, queue: str, node_name: str, worker: str) -> None:
    """A node name and a worker (consumer) name may serve only one subscriber."""
    provider = model.load_node(prov, queue)
    if provider is not None and provider.node_name == node_name:
        raise NodeError(f"Node name already in use: {node_name}")
    for sub_node, sub_worker in model.subscribers(prov, queue):
        if sub_node == node_name and sub_worker != worker:
            raise NodeError(f"Node name already in use by worker {sub_worker}: {node_name}")
        if sub_worker == worker and sub_node != node_name:
            raise NodeError(f"Worker {worker} already subscribed as node {sub_node}")


def _announce(
    config: Config, queue: str, req: NodeRequest, provider_name: str, members: list[model.Member]
) -> None:
    """Tell the other live members about the new node, so status works from anywhere."""
    for member in members:
        if member.dead or member.node_name in (req.node_name, provider_name):
            continue
        try:
            with connect.connect_remote(config, member.node_location) as other:
                if model.load_node(other, queue) is not None:
                    model.register_location(other, queue, req.node_name, req.public_location)
        except DatabaseError as exc:
            log.warning("could not register location on node %s: %s", member.node_name, exc)
        except psycopg.Error as exc:
            log.warning(
                "could not register location on node %s: %s", member.node_name, error_text(exc)
            )


def _insert_node(conn: psycopg.Connection, queue: str, req: NodeRequest, worker: str) -> None:
    conn.execute(
        """
        insert into ferry_node.node_info (queue_name, node_type, node_name, worker_name,
                                          node_attrs, combined_queue)
        values (%s, %s, %s, %s, %s, %s)
        """,
        (
            queue,
            req.node_type,
            req.node_name,
            worker,
            watermarks.attrs_text(req.sync_watermark),
            req.combined_queue,
        ),  # fmt: skip
    )


def _insert_state(
    conn: psycopg.Connection,
    queue: str,
    worker: str,
    provider: str | None,
    tick_id: int | None,
    tick_time,
) -> None:
    conn.execute(
        """
        insert into ferry_node.local_state
            (queue_name, consumer_name, provider_node, last_tick_id, last_tick_time)
        values (%s, %s, %s, %s, %s)
        """,
        (queue, worker, provider, tick_id, tick_time),
    )
