"""The cascade bookkeeping of one node (``ferry_node`` tables): who it is, and its position.

Everything here takes an open connection and the queue name, so the worker, the admin
commands and ``status`` share the same reads.  The worker also writes here: its heartbeat,
its last error and, in the same transaction as the applied data, the last applied tick,
which is the exactly-once marker.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from pgferry.db import mask_connstr
from pgferry.errors import AlreadyRunning, NodeError
from pgferry.polling import WaitTimeout, wait_until


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
class Divergence:
    """What replay found missing here and repaired (sql/node/tables/012_divergence.sql)."""

    rows: int  # rows an update re-created: the key was missing here
    deletes: int  # deletes whose key was missing here
    since: datetime | None  # the first counted
    last: datetime | None  # the last counted
    tables: str | None  # the tables of the last batch that had any


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
    consumer_name: str  # the worker's consumer on the provider's queue
    last_tick_id: int | None  # last tick applied here
    paused: bool
    # The provider's time of that tick: with the id, the tick's identity (docs/failover.md).
    last_tick_time: datetime | None = None

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


# The node row of a queue (parameter: the queue name), each column named as NodeInfo's field.
NODE_SQL = """
        select n.queue_name, n.node_type, n.node_name, n.worker_name, n.combined_queue,
               s.provider_node, p.node_location as provider_location,
               l.node_location as location,
               coalesce(s.consumer_name, n.worker_name) as consumer_name, s.last_tick_id,
               coalesce(s.paused, false) as paused, s.last_tick_time
          from ferry_node.node_info n
          left join ferry_node.local_state s
                 on s.queue_name = n.queue_name and s.consumer_name = n.worker_name
          left join ferry_node.node_location p
                 on p.queue_name = n.queue_name and p.node_name = s.provider_node
          left join ferry_node.node_location l
                 on l.queue_name = n.queue_name and l.node_name = n.node_name
         where n.queue_name = %s
        """


# The node's rows as one text that changes whenever one does (the worker's idle check;
# parameter {q}: the queue): the node, the locations, the consumers' positions and pause
# (read by column: the heartbeat and each batch's tick record write local_state's row).
NODE_STAMP = sql.SQL(
    """concat_ws('|',
         (select n.xmin::text from ferry_node.node_info n where n.queue_name = {q}),
         (select string_agg(concat_ws(',', l.node_name, l.xmin), ';' order by l.node_name)
            from ferry_node.node_location l where l.queue_name = {q}),
         (select string_agg(concat_ws(',', s.consumer_name, s.provider_node,
                                      s.last_tick_id, s.paused),
                            ';' order by s.consumer_name)
            from ferry_node.local_state s where s.queue_name = {q}))"""
)
# Whether a consumer of the node is behind or recorded an error (parameter {q}).
NODE_TROUBLE = sql.SQL(
    """exists (select 1 from ferry_node.local_state s
                where s.queue_name = {q} and (not s.uptodate or s.cur_error is not null))"""
)


def load_node(conn: psycopg.Connection, queue: str) -> NodeInfo | None:
    """The local node for ``queue``, or None when this database is not a node of it."""
    if not is_installed(conn):
        return None
    with conn.cursor(row_factory=class_row(NodeInfo)) as cur:
        return cur.execute(NODE_SQL, (queue,)).fetchone()


def node_missing(queue: str) -> NodeError:
    return NodeError(f"Node not initialized for queue: {queue} (run create-root/branch/leaf)")


def require_node(conn: psycopg.Connection, queue: str) -> NodeInfo:
    node = load_node(conn, queue)
    if node is None:
        raise node_missing(queue)
    return node


def worker_node(conn: psycopg.Connection, queue: str) -> NodeInfo:
    """The node as its worker needs it: initialised, and a subscriber knows its provider."""
    node = require_node(conn, queue)
    if node.node_type != "root" and node.provider_location is None:
        raise NodeError(f"Provider location unknown for node {node.node_name} (queue {queue})")
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


def lost_in_failover(conn: psycopg.Connection, queue: str) -> int:
    """Rows saved in ferry_node.lost_after_failover for ``queue`` (0 on a node whose schema
    predates the table)."""
    row = conn.execute(
        "select to_regclass('ferry_node.lost_after_failover') is not null"
    ).fetchone()
    if not row or not row[0]:
        return 0
    found = conn.execute(
        "select count(*) from ferry_node.lost_after_failover where queue_name = %s", (queue,)
    ).fetchone()
    return found[0] if found else 0


def divergence(conn: psycopg.Connection, queue: str, consumer: str) -> Divergence | None:
    """The node's divergence totals; None on a node whose schema predates them (status
    reads other members, which may not have been upgraded yet)."""
    counted = conn.execute(
        """
        select exists (select from pg_attribute
                        where attrelid = 'ferry_node.local_state'::regclass
                          and attname = 'diverged_rows' and not attisdropped)
        """
    ).fetchone()
    if not counted or not counted[0]:
        return None
    with conn.cursor(row_factory=class_row(Divergence)) as cur:
        cur.execute(
            """
            select diverged_rows as rows, diverged_deletes as deletes,
                   diverged_since as since, diverged_last as last, diverged_tables as tables
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


# --- the worker's position and health -------------------------------------------------
_RECORD_TICK = """
        update ferry_node.local_state s
           set last_tick_id = %s, last_tick_time = %s, cur_error = null, error_time = null,
               last_seen = now()
          from (select last_tick_id, provider_node from ferry_node.local_state
                 where queue_name = %s and consumer_name = %s for update) old
         where s.queue_name = %s and s.consumer_name = %s
        returning old.last_tick_id, old.provider_node
"""
_RECORD_APPLIED = """
with applied as (
    insert into ferry_node.applied_tick (queue_name, consumer_name, tick_id, tick_time, tables)
    values (%s, %s, %s, %s, %s)
    on conflict (queue_name, consumer_name, tick_id)
    do update set tick_time = excluded.tick_time, tables = excluded.tables)
"""


def forget_applied(
    conn: psycopg.Connection, queue_name: str, consumer_name: str, older_than: timedelta
) -> None:
    """Drop the applied ticks' records older than ``older_than`` (failover_history)."""
    conn.execute(
        """
        delete from ferry_node.applied_tick
         where queue_name = %s and consumer_name = %s and tick_time < now() - %s
        """,
        (queue_name, consumer_name, older_than),
    )


@dataclass(frozen=True)
class AppliedTick:
    """A tick a consumer applied here (``failover_history``): its provider's time and the
    tables its batch changed."""

    tick_id: int
    tick_time: datetime | None
    tables: list[str]


def applied_ticks(conn: psycopg.Connection, queue: str, consumer: str) -> list[AppliedTick]:
    """The ticks ``consumer`` applied here that are still recorded, newest first."""
    with conn.cursor(row_factory=class_row(AppliedTick)) as cur:
        cur.execute(
            """
            select tick_id, tick_time, tables from ferry_node.applied_tick
             where queue_name = %s and consumer_name = %s order by tick_id desc
            """,
            (queue, consumer),
        )
        return cur.fetchall()


def forget_applied_after(conn: psycopg.Connection, queue: str, consumer: str, tick: int) -> None:
    """Drop the records of the ticks ``consumer`` applied past ``tick`` (it was put back)."""
    conn.execute(
        "delete from ferry_node.applied_tick"
        " where queue_name = %s and consumer_name = %s and tick_id > %s",
        (queue, consumer, tick),
    )


@dataclass(frozen=True)
class LostRow:
    """A row this node held that its provider lost in a failover (or holds otherwise)."""

    row_key: str  # the key's values as row(...)::text
    held_here: str  # the row here, as jsonb text
    on_provider: str | None  # the provider's row of that key (None: it has none)


def save_lost(
    conn: psycopg.Connection,
    queue: str,
    provider_node: str | None,
    table: str,
    common_tick: int,
    lost_tick: int,
    rows: list[LostRow],
) -> None:
    """Keep ``rows`` of ``table`` in ferry_node.lost_after_failover (docs/failover.md)."""
    with conn.cursor() as cur:
        cur.executemany(
            """
            insert into ferry_node.lost_after_failover
                (queue_name, provider_node, common_tick, lost_tick, table_name, row_key,
                 held_here, on_provider)
            values (%s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb)
            """,
            [
                (queue, provider_node, common_tick, lost_tick, table, r.row_key, r.held_here,
                 r.on_provider)
                for r in rows
            ],
        )  # fmt: skip


# How a refused batch is worded where it is refused: at the start of its transaction
# (hold_position) or at the record of its tick (record_tick).
_REFUSED = {
    "start": ("before applying a batch: batch not applied", "is not the batch's start"),
    "record": ("while applying a batch: batch discarded", "changed while applying"),
}


def check_position(
    row: tuple | None,
    queue_name: str,
    consumer_name: str,
    expected_prev: int | None,
    provider_node: str | None,
    at: str,
) -> None:
    """Refuse a batch that is no longer the node's to apply, from its position row
    ``(last_tick_id, provider_node, ...)``: none at all, another provider than the one the
    batch was read from, or a tick that is not where the batch starts.  ``at``: "start"
    or "record" (the wording, see _REFUSED)."""
    if row is None:
        raise NodeError(f"No local state for consumer {consumer_name} on queue {queue_name}")
    provider_text, position_text = _REFUSED[at]
    if provider_node is not None and row[1] != provider_node:
        raise NodeError(f"Provider changed from {provider_node} to {row[1]} {provider_text}")
    if expected_prev is not None and row[0] is not None and row[0] != expected_prev:
        raise NodeError(
            f"Lost position: local last tick {row[0]} {position_text} (expected {expected_prev})"
        )


def record_tick(
    conn: psycopg.Connection,
    queue_name: str,
    consumer_name: str,
    tick_id: int,
    tick_time: datetime | None,
    expected_prev: int | None,
    provider_node: str | None = None,
    tables: list[str] | None = None,
) -> None:
    """Set last applied tick inside the caller's transaction; refuse a moved position.

    ``tables`` (the main stream's batches): the tables the batch changed, kept with the
    tick in ferry_node.applied_tick to reconcile after a provider's failover.

    ``expected_prev`` guards against a second applier of the same batch, ``provider_node``
    against a batch read from a provider the node has left meanwhile (change-provider while
    the batch was in flight): the row is locked and compared, so such a batch never lands.
    """
    # One statement: the row is locked and read as it was before the update, which the
    # checks below compare; a refused batch rolls the update back with the rest.
    params: tuple = (tick_id, tick_time, queue_name, consumer_name, queue_name, consumer_name)
    query = _RECORD_TICK
    if tables is not None:  # the same statement: no round trip more per batch
        query = _RECORD_APPLIED + _RECORD_TICK
        params = (queue_name, consumer_name, tick_id, tick_time, tables, *params)
    row = conn.execute(query, params).fetchone()
    check_position(row, queue_name, consumer_name, expected_prev, provider_node, "record")


def hold_position(
    conn: psycopg.Connection,
    queue_name: str,
    consumer_name: str,
    expected_prev: int | None,
    provider_node: str | None,
) -> None:
    """At the start of a batch's transaction: lock the node's position row against a pause
    (and so against change-provider, which pauses first) until the transaction ends, and
    refuse a batch that is no longer the node's to apply.

    A handler that writes outside PostgreSQL (a lake table) commits there before the
    transaction does: a pause or move let through meanwhile would discard a batch already
    written, and the next one, read over other tick bounds from the new provider, would
    write its changes again.  ``for key share`` waits only for ``for update`` (the pause);
    the worker's own updates of the row from other connections pass.
    """
    row = conn.execute(
        """
        select last_tick_id, provider_node, paused from ferry_node.local_state
         where queue_name = %s and consumer_name = %s for key share
        """,
        (queue_name, consumer_name),
    ).fetchone()
    if row is not None and row[2]:
        raise NodeError("Node is paused: batch not applied")
    check_position(row, queue_name, consumer_name, expected_prev, provider_node, "start")
    if expected_prev is not None:
        # For the handlers that commit elsewhere: where this batch starts (BATCH_START).
        conn.execute("select set_config(%s, %s, true)", (BATCH_START, str(expected_prev)))


# The transaction setting that holds the tick a node's batch starts after (its position).
BATCH_START = "pgferry.batch_start"


def batch_start(conn: psycopg.Connection) -> int | None:
    """The tick the batch applied in ``conn``'s transaction starts after (None: not a batch
    of the node's own stream)."""
    row = conn.execute("select current_setting(%s, true)", (BATCH_START,)).fetchone()
    return int(row[0]) if row and row[0] else None


def add_divergence(
    conn: psycopg.Connection,
    queue_name: str,
    consumer_name: str,
    rows: int,
    deletes: int,
    tables: str,
) -> None:
    """Add to the node's divergence totals, inside the transaction that applied the batch."""
    conn.execute(
        """
        update ferry_node.local_state
           set diverged_rows = diverged_rows + %s, diverged_deletes = diverged_deletes + %s,
               diverged_since = coalesce(diverged_since, now()), diverged_last = now(),
               diverged_tables = %s
         where queue_name = %s and consumer_name = %s
        """,
        (rows, deletes, tables, queue_name, consumer_name),
    )


def set_position(
    conn: psycopg.Connection,
    queue_name: str,
    consumer_name: str,
    tick: int,
    tick_time: datetime | None,
) -> None:
    """Record ``tick`` (made at ``tick_time`` on the provider) as the last applied one
    without applying anything (worker --reset, a reconcile)."""
    conn.execute(
        """
        update ferry_node.local_state set last_tick_id = %s, last_tick_time = %s
         where queue_name = %s and consumer_name = %s
        """,
        (tick, tick_time, queue_name, consumer_name),
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


def clear_error(conn: psycopg.Connection, queue_name: str, consumer_name: str) -> None:
    """Forget the consumer's recorded error (its event was skipped), leaving last_seen."""
    conn.execute(
        """
        update ferry_node.local_state set cur_error = null, error_time = null
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


LOCK_APP = "pgferry-lock"  # application_name of the session holding the node's lock


def lock_holder_name() -> str:
    """``application_name`` of the lock's session: names the worker process holding it
    (``pgferry-lock 1234@host``), which a refused second worker reports."""
    return f"{LOCK_APP} {os.getpid()}@{socket.gethostname()}"[:63]


def _holder_text(backend_pid: int, client: object, app: str | None) -> str:
    """Who holds the node's lock, as a refused worker says it: the worker's own process
    when its session names it, else only what the server knows (its session's pid)."""
    prefix = f"{LOCK_APP} "
    if app and app.startswith(prefix) and "@" in app:
        pid, _, host = app[len(prefix) :].partition("@")
        return f"worker process {pid} on {host}; its database session is server pid {backend_pid}"
    where = f" from {client}" if client else ""
    return (
        f"held by the database session of server pid {backend_pid}{where},"
        " not the worker's own pid (a worker of an older pgferry)"
    )


# Seconds a worker waits for the node's lock before it says another worker holds it.
LOCK_GRACE = 2.0


def lock_node(conn: psycopg.Connection, queue_name: str) -> None:
    """Take the session lock that makes the caller the node's only worker, or fail.

    One applier per node: two would apply the same batches twice.  The lock belongs to the
    database (every ini, pidfile and host that names this node meets it) and ends with the
    session, so a killed worker never leaves it behind.
    """

    def taken() -> bool:
        row = conn.execute(
            "select pg_try_advisory_lock(hashtext('pgferry-worker'), hashtext(%s))",
            (queue_name,),
        ).fetchone()
        return bool(row and row[0])

    # A worker that has just stopped releases the lock when its server process ends, a
    # moment after its connection closed: a worker started right after it (a restart)
    # waits that moment out rather than failing.
    try:
        wait_until(taken, timeout=LOCK_GRACE, interval=0.05, what="the node's lock")
    except WaitTimeout:
        holder = conn.execute(
            """
            select a.pid, a.client_addr, a.application_name from pg_locks l
              join pg_stat_activity a on a.pid = l.pid
             where l.locktype = 'advisory' and l.granted
               and l.classid = hashtext('pgferry-worker')::oid
               and l.objid = hashtext(%s)::oid and l.objsubid = 2
               and l.database = (select oid from pg_database
                                  where datname = current_database())
            """,
            (queue_name,),
        ).fetchone()
        where = f" ({_holder_text(*holder)})" if holder else ""
        raise AlreadyRunning(
            f"Another worker is already running for this node (queue {queue_name}){where}"
        ) from None
