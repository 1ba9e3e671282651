"""The replication worker's connections: to its node, to its provider, and the one that
holds the node's lock.

The node's connection runs replay's transactions; a subscriber sets
``session_replication_role = replica`` on it once.  The provider's runs in autocommit and
text format, listens for its queue's ticks, and is reopened when the provider moves
(replay's readers follow it).  Both are reopened, with replay's own connections, once the
node's is older than ``connection_lifetime`` seconds (:meth:`WorkerConnections.recycle`).
The lock connection (autocommit, on the node) holds :func:`model.lock_node` for as long as
the worker runs, and is kept when the others are recycled: an advisory lock cannot pass
from one session to another, so reopening it would leave the node unlocked for a moment.
The idle checks read on it and a root hears its own queue's ticks on it.
:meth:`WorkerConnections.close` closes all three, so the lock is released while the
worker waits to retry after an error.
"""

from __future__ import annotations

import contextlib
import logging
import time

import psycopg

from pgferry.apply.replay.batch import Replayer
from pgferry.apply.replay.read import set_text_format
from pgferry.apply.worker_settings import WorkerSettings
from pgferry.config import Config
from pgferry.db import connect, describe, error_text, server_of
from pgferry.errors import DatabaseError
from pgferry.node import model
from pgferry.node.connect import remote_connstr
from pgferry.queue import ticks as queue_ticks

log = logging.getLogger(__name__)

REPLICA_REMEDY = (
    "cannot set session_replication_role = replica: {detail}; "
    "connect as a role allowed to set it "
    "(PostgreSQL 15: GRANT SET ON PARAMETER session_replication_role TO <role>)"
)


class WorkerConnections:
    """The worker's three connections (see the module docstring).  ``config`` and
    ``settings`` are replaced on reload; ``replay`` is told of every new provider
    connection and closed with the others."""

    def __init__(self, config: Config, settings: WorkerSettings, replay: Replayer) -> None:
        self.config = config
        self.settings = settings
        self.replay = replay
        self.local: psycopg.Connection | None = None
        self.provider: psycopg.Connection | None = None
        self.provider_dsn: str | None = None
        self.lock: psycopg.Connection | None = None  # holds the node's lock
        self.root_listens = False  # the lock connection hears the root queue's ticks
        self._connected_at = 0.0
        self.recycled = 0  # times the connections were reopened for their lifetime
        self._replica_conn: psycopg.Connection | None = None
        # host:port that served each connection last: a new one is logged (a failover).
        self._servers: dict[str, str] = {}

    def _note_server(self, role: str, conn: psycopg.Connection) -> None:
        """Log the server a new connection reached when it is not the one before: behind
        a multi-host connect string, the primary the worker follows now."""
        server = server_of(conn)
        before = self._servers.get(role)
        if server != before:
            if before is not None:
                log.info("%s connection now served by %s (was %s)", role, server, before)
            self._servers[role] = server

    def recycle(self) -> None:
        """Close the node's and the provider's connections and replay's (the next loop
        reopens them); the lock connection stays, and with it the node's lock."""
        for conn in (self.local, self.provider):
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
        self.local = self.provider = None
        self.replay.close()

    def close(self) -> None:
        self.recycle()
        if self.lock is not None:
            # Released while we wait to retry: a worker started meanwhile takes the node
            # and this one stops at its next loop, so there is never more than one.
            with contextlib.suppress(Exception):
                self.lock.close()
            self.lock = None
            self.root_listens = False

    def to_local(self) -> psycopg.Connection:
        """The node's connection, reopened once older than ``connection_lifetime`` (with
        the provider's and replay's: :meth:`recycle`)."""
        lifetime = self.settings.connection_lifetime
        if (
            self.local is not None
            and lifetime > 0
            and time.monotonic() - self._connected_at > lifetime
        ):
            self.recycle()
            self.recycled += 1
        if self.local is None or self.local.closed:
            conn = connect(self.settings.local_dsn, application_name="pgferry-worker")
            # The provider forgets a batch once it is finished: the transaction recording
            # it must be on disk first, whatever the server's default.  Set once for the
            # session rather than in every batch's transaction (a round trip each).
            conn.execute("set synchronous_commit = on")
            conn.commit()
            self._note_server("node", conn)
            self.local = conn
            self._connected_at = time.monotonic()
            self.replay.use_node(self.settings.local_dsn)
        return self.local

    def to_provider(self, location: str) -> psycopg.Connection:
        """The provider's connection, reopened when ``location`` names another one."""
        dsn = remote_connstr(self.config, location)
        if self.provider is not None and (self.provider.closed or dsn != self.provider_dsn):
            self.provider.close()
            self.provider = None
        if self.provider is None:
            self.provider = connect(dsn, autocommit=True, application_name="pgferry-worker")
            set_text_format(self.provider)
            queue_ticks.listen_for_ticks(self.provider)
            self.provider_dsn = dsn
            self._note_server("provider", self.provider)
            self.replay.use_provider(dsn)
        return self.provider

    def lost_provider(self) -> str | None:
        """Where the provider's connection pointed when it broke (host:port/db), else None:
        a stalled network is noticed on it (db.NETWORK_DEFAULTS) and named in the log."""
        prov = self.provider
        if prov is not None and prov.broken and self.provider_dsn:
            return describe(self.provider_dsn)
        return None

    def set_replica_role(self, conn: psycopg.Connection) -> None:
        # Session-wide: local triggers (the deny-write guard, FK checks) stay quiet.
        if self._replica_conn is conn:
            return
        try:
            conn.execute("set session_replication_role = replica")
            conn.commit()
            self._replica_conn = conn
        except psycopg.errors.InsufficientPrivilege as exc:
            conn.close()
            raise DatabaseError(REPLICA_REMEDY.format(detail=error_text(exc))) from None

    def take_lock(self) -> bool:
        """Hold the node's lock (see :func:`model.lock_node`); True when it was taken now,
        False when this worker held it already."""
        if self.lock is not None and not self.lock.closed:
            return False
        conn = connect(
            self.settings.local_dsn, autocommit=True, application_name=model.lock_holder_name()
        )
        try:
            model.lock_node(conn, self.settings.queue)
        except BaseException:
            conn.close()
            raise
        self._note_server("lock", conn)
        self.lock = conn
        return True

    def listen_root(self) -> None:
        """Hear the root queue's ticks on the lock connection (they wake an idle root).
        Only a root listens: nobody would read the notifications on another node's."""
        if not self.root_listens and self.lock is not None:
            queue_ticks.listen_for_ticks(self.lock)
            self.root_listens = True
