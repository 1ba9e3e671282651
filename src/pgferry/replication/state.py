"""This node's identity and position: ``ferry_node.node_info`` and ``local_state``.

The worker reads who it is (root/branch/leaf, provider location) here and writes its
heartbeat, its last error and — in the same transaction as the applied data — the last
applied tick, which is the exactly-once marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from pgferry.errors import AlreadyRunning, NodeError


@dataclass(frozen=True)
class NodeState:
    queue_name: str
    node_type: str
    node_name: str
    worker_name: str
    consumer_name: str
    provider_node: str | None
    provider_location: str | None
    last_tick_id: int | None
    paused: bool


def load_node(conn: psycopg.Connection, queue_name: str) -> NodeState:
    """The local node of ``queue_name`` and the worker's position; clear error when absent."""
    row = conn.execute(
        """
        select n.node_type, n.node_name, n.worker_name,
               coalesce(s.consumer_name, n.worker_name), s.provider_node, l.node_location,
               s.last_tick_id, coalesce(s.paused, false)
          from ferry_node.node_info n
          left join ferry_node.local_state s
                 on s.queue_name = n.queue_name and s.consumer_name = n.worker_name
          left join ferry_node.node_location l
                 on l.queue_name = n.queue_name and l.node_name = s.provider_node
         where n.queue_name = %s
        """,
        (queue_name,),
    ).fetchone()
    if row is None:
        raise NodeError(f"Node not initialized for queue {queue_name}")
    node_type, node_name, worker, consumer, provider, location, last_tick, paused = row
    if node_type != "root" and location is None:
        raise NodeError(f"Provider location unknown for node {node_name} (queue {queue_name})")
    return NodeState(
        queue_name, node_type, node_name, worker, consumer, provider, location, last_tick, paused
    )


def record_tick(
    conn: psycopg.Connection,
    queue_name: str,
    consumer_name: str,
    tick_id: int,
    tick_time: datetime | None,
    expected_prev: int | None,
    provider_node: str | None = None,
) -> None:
    """Set last applied tick inside the caller's transaction; refuse a moved position.

    ``expected_prev`` guards against a second applier of the same batch, ``provider_node``
    against a batch read from a provider the node has left meanwhile (change-provider while
    the batch was in flight): the row is locked and compared, so such a batch never lands.
    """
    row = conn.execute(
        """
        select last_tick_id, provider_node from ferry_node.local_state
         where queue_name = %s and consumer_name = %s for update
        """,
        (queue_name, consumer_name),
    ).fetchone()
    if row is None:
        raise NodeError(f"No local state for consumer {consumer_name} on queue {queue_name}")
    if provider_node is not None and row[1] != provider_node:
        raise NodeError(
            f"Provider changed from {provider_node} to {row[1]} while applying a batch:"
            " batch discarded"
        )
    if expected_prev is not None and row[0] is not None and row[0] != expected_prev:
        raise NodeError(
            f"Lost position: local last tick {row[0]} changed while applying "
            f"(expected {expected_prev})"
        )
    conn.execute(
        """
        update ferry_node.local_state
           set last_tick_id = %s, last_tick_time = %s, cur_error = null, error_time = null,
               last_seen = now()
         where queue_name = %s and consumer_name = %s
        """,
        (tick_id, tick_time, queue_name, consumer_name),
    )


def set_position(conn: psycopg.Connection, queue_name: str, consumer_name: str, tick: int) -> None:
    """Record ``tick`` as the last applied one without applying anything (worker --reset)."""
    conn.execute(
        """
        update ferry_node.local_state set last_tick_id = %s
         where queue_name = %s and consumer_name = %s
        """,
        (tick, queue_name, consumer_name),
    )


def heartbeat(conn: psycopg.Connection, queue_name: str, consumer_name: str) -> None:
    """Mark the worker alive and healthy (clears a recorded error)."""
    conn.execute(
        """
        update ferry_node.local_state
           set last_seen = now(), cur_error = null, error_time = null
         where queue_name = %s and consumer_name = %s
        """,
        (queue_name, consumer_name),
    )


def record_error(conn: psycopg.Connection, queue_name: str, consumer_name: str, text: str) -> None:
    conn.execute(
        """
        update ferry_node.local_state
           set cur_error = %s, error_time = now(), last_seen = now()
         where queue_name = %s and consumer_name = %s
        """,
        (text, queue_name, consumer_name),
    )


def lock_node(conn: psycopg.Connection, queue_name: str) -> None:
    """Take the session lock that makes the caller the node's only worker, or fail.

    One applier per node: two would apply the same batches twice.  The lock belongs to the
    database (every ini, pidfile and host that names this node meets it) and ends with the
    session, so a killed worker never leaves it behind.
    """
    row = conn.execute(
        "select pg_try_advisory_lock(hashtext('pgferry-worker'), hashtext(%s))", (queue_name,)
    ).fetchone()
    if not row or not row[0]:
        holder = conn.execute(
            """
            select a.pid, a.client_addr, a.application_name from pg_locks l
              join pg_stat_activity a on a.pid = l.pid
             where l.locktype = 'advisory' and l.granted
               and l.classid = hashtext('pgferry-worker')::oid
               and l.objid = hashtext(%s)::oid
            """,
            (queue_name,),
        ).fetchone()
        where = f" (server pid {holder[0]})" if holder else ""
        raise AlreadyRunning(
            f"Another worker is already running for this node (queue {queue_name}){where}"
        )
