"""Reading the cascade bookkeeping of one node (``ferry_node`` tables).

Everything here takes an open connection and the queue name, so the worker, the admin
commands and ``status`` share the same reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import class_row

from pgferry.db import mask_connstr
from pgferry.errors import NodeError


@dataclass
class Member:
    """A row of ``ferry_node.node_location``."""

    node_name: str
    node_location: str
    dead: bool

    @property
    def masked_location(self) -> str:
        return mask_connstr(self.node_location)


@dataclass
class LocalState:
    """The position and health of one consumer applying into this node."""

    consumer_name: str
    provider_node: str | None
    last_tick_id: int | None
    last_tick_time: datetime | None
    paused: bool
    uptodate: bool
    cur_error: str | None
    error_time: datetime | None
    last_seen: datetime | None


@dataclass
class NodeInfo:
    """The local node of a queue: its name, type, worker and (for subscribers) provider."""

    queue_name: str
    node_type: str
    node_name: str
    worker_name: str
    combined_queue: str | None
    provider_node: str | None
    provider_location: str | None
    location: str | None

    @property
    def is_root(self) -> bool:
        return self.node_type == "root"

    @property
    def has_queue(self) -> bool:
        """Root and branch hold a queue that others consume; a leaf does not."""
        return self.node_type in ("root", "branch")


def is_installed(conn: psycopg.Connection) -> bool:
    row = conn.execute("select to_regclass('ferry_node.node_info') is not null").fetchone()
    return bool(row and row[0])


def load_node(conn: psycopg.Connection, queue: str) -> NodeInfo | None:
    """The local node for ``queue``, or None when this database is not a node of it."""
    if not is_installed(conn):
        return None
    row = conn.execute(
        """
        select n.queue_name, n.node_type, n.node_name, n.worker_name, n.combined_queue,
               s.provider_node, p.node_location, l.node_location
          from ferry_node.node_info n
          left join ferry_node.local_state s
                 on s.queue_name = n.queue_name and s.consumer_name = n.worker_name
          left join ferry_node.node_location p
                 on p.queue_name = n.queue_name and p.node_name = s.provider_node
          left join ferry_node.node_location l
                 on l.queue_name = n.queue_name and l.node_name = n.node_name
         where n.queue_name = %s
        """,
        (queue,),
    ).fetchone()
    return None if row is None else NodeInfo(*row)


def require_node(conn: psycopg.Connection, queue: str) -> NodeInfo:
    node = load_node(conn, queue)
    if node is None:
        raise NodeError(f"Node not initialized for queue: {queue} (run create-root/branch/leaf)")
    return node


def members(conn: psycopg.Connection, queue: str) -> list[Member]:
    with conn.cursor(row_factory=class_row(Member)) as cur:
        cur.execute(
            """
            select node_name, node_location, dead from ferry_node.node_location
             where queue_name = %s order by node_name
            """,
            (queue,),
        )
        return cur.fetchall()


def local_state(conn: psycopg.Connection, queue: str, consumer: str) -> LocalState | None:
    with conn.cursor(row_factory=class_row(LocalState)) as cur:
        cur.execute(
            """
            select consumer_name, provider_node, last_tick_id, last_tick_time, paused,
                   uptodate, cur_error, error_time, last_seen
              from ferry_node.local_state where queue_name = %s and consumer_name = %s
            """,
            (queue, consumer),
        )
        return cur.fetchone()


def subscribers(conn: psycopg.Connection, queue: str) -> list[tuple[str, str]]:
    """(subscriber_node, worker_name) of the nodes that read this node's queue."""
    rows = conn.execute(
        """
        select subscriber_node, worker_name from ferry_node.subscriber_info
         where queue_name = %s order by subscriber_node
        """,
        (queue,),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def register_location(
    conn: psycopg.Connection, queue: str, node: str, location: str, dead: bool = False
) -> None:
    """Insert or update a member; used on every node that learns of another."""
    conn.execute(
        """
        insert into ferry_node.node_location (queue_name, node_name, node_location, dead)
        values (%s, %s, %s, %s)
        on conflict (queue_name, node_name)
        do update set node_location = excluded.node_location, dead = excluded.dead
        """,
        (queue, node, location, dead),
    )
