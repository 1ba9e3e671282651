"""Whether a node's worker runs: the rule that ``status``, ``tables`` and the providers'
metrics share.

What a running worker leaves on its node: its heartbeat, ``ferry_node.local_state.last_seen``
(written at most every ``idle.HEARTBEAT_EVERY`` seconds while idle, with every batch's tick
record, and with every error it records), and the node's lock (:func:`model.lock_node`, an
advisory lock of its session), held for as long as it runs except while it waits
``exception_sleep`` seconds to retry after an error, just after recording that error.  A
killed worker's lock goes at once: the server ends a session whose client has gone.  A
batch writes ``last_seen`` only when it commits, so a long batch leaves an old heartbeat
with its lock held.

So a node's worker *counts as down* when no session holds the node's lock and its heartbeat
is older than ``exception_sleep`` plus :data:`DOWN_MARGIN` seconds (30 with the defaults):
the longest a running worker is without its lock after its last heartbeat, with room for
its reconnection.  A node whose worker never ran (``last_seen`` empty) is not judged: it
is being set up.  A worker that holds the lock but has written no heartbeat for longer than
an idle worker would (:func:`silent_after`) is *silent*: shown, not counted as down, since
a long batch looks the same (and so does a worker whose host vanished, until the server's
TCP keepalives end its session).

The reading is one statement on the node's database (:func:`read`).  Advisory locks are
the database's, but ``pg_locks`` lists the whole server's: the read keeps to its own
database, since two nodes of one queue may share a server (their locks have the same keys).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from pgferry import settings
from pgferry.config import Config

EXCEPTION_SLEEP = settings.EXCEPTION_SLEEP.fixed
LOOP_DELAY = settings.LOOP_DELAY.fixed
DOWN_MARGIN = 10.0  # seconds a retrying worker takes at most to reconnect and lock again
# An idle worker's heartbeat is at most this old (idle.HEARTBEAT_EVERY), plus a root's
# longest idle wait (idle.ROOT_BACKOFF loop_delays) and a margin.
HEARTBEAT_EVERY = 90.0
ROOT_BACKOFF = 8

READ = """
    select extract(epoch from now() - s.last_seen)::float8,
           (select min(l.pid) from pg_locks l
             where l.locktype = 'advisory' and l.granted
               and l.classid = hashtext('pgferry-worker')::oid
               and l.objid = hashtext(%(q)s)::oid and l.objsubid = 2
               and l.database = (select oid from pg_database
                                  where datname = current_database()))
      from ferry_node.node_info n
      join ferry_node.local_state s
        on s.queue_name = n.queue_name and s.consumer_name = n.worker_name
     where n.queue_name = %(q)s
"""


@dataclass(frozen=True)
class WorkerReading:
    """A node's worker as one read saw it."""

    seconds: float | None  # since its last heartbeat (None: it never ran)
    lock_pid: int | None  # the server pid of the session holding the node's lock

    def down(self, after: float) -> bool:
        """The rule of the module docstring; ``after``: :func:`down_after`."""
        return self.lock_pid is None and self.seconds is not None and self.seconds > after

    def silent(self, after: float) -> bool:
        """Holds the lock, but no heartbeat for ``after`` (:func:`silent_after`) seconds."""
        return self.lock_pid is not None and self.seconds is not None and self.seconds > after

    def line(self) -> str:
        """'no heartbeat for 1m12s and no session holds the node's lock' (down), or
        'no heartbeat for 2m05s, its lock held by server pid 4242 (...)' (silent)."""
        age = _age(self.seconds)
        if self.lock_pid is None:
            return f"no heartbeat for {age} and no session holds the node's lock"
        return (
            f"no heartbeat for {age}, its lock held by server pid {self.lock_pid}"
            " (a long batch, or a hung worker)"
        )


def _age(seconds: float | None) -> str:
    total = int(seconds or 0)
    minutes, secs = divmod(total, 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def down_after(config: Config | None) -> float:
    """Seconds without heartbeat (and lock) after which a worker counts as down."""
    if config is None:
        return EXCEPTION_SLEEP + DOWN_MARGIN
    return config.get(settings.EXCEPTION_SLEEP) + DOWN_MARGIN


def silent_after(config: Config | None) -> float:
    """Seconds without heartbeat after which a worker holding its lock counts as silent."""
    delay = LOOP_DELAY if config is None else config.get(settings.LOOP_DELAY)
    return HEARTBEAT_EVERY + ROOT_BACKOFF * delay + DOWN_MARGIN


def read(conn: psycopg.Connection, queue: str) -> WorkerReading | None:
    """The worker of the node of ``queue`` on ``conn``'s database; None when it is not one."""
    row = conn.execute(READ, {"q": queue}).fetchone()
    if row is None:
        return None
    return WorkerReading(row[0], row[1])
