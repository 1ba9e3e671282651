"""Merged partitions: several partition queues feeding the same tables of one database.

Each partition is a cascade of its own (a root per shard database, say).  The combined
database holds one leaf node of every partition queue, each created with
``create-leaf --merge=SET`` (``node_info.combined_queue`` = SET; several nodes in one
database are allowed, since every node's bookkeeping is keyed by its queue) and each run
by its own worker.  A table such a leaf adds is *merged* unless added with ``--no-merge``:
every part's leaf registers it in its own queue and applies its own part's rows to it.

What keeps the parts apart:

* The copy of a part truncates the table only when no other part holds it (in state
  ``catching-up`` or ``ok``): the first part's copy clears what was there, the others copy
  their rows on top.  Copies of one merged table never run at the same time
  (:func:`lock_destinations`), so that decision cannot race with another part's copy.
* A TRUNCATE of a part's source is not replayed (it would erase the other parts' rows):
  merged tables are registered with ``skip_truncate``, and replay logs each one it passes.
* A single part cannot be copied again while others hold the table (its old rows cannot be
  told from the others' without a truncate): ``resync --merge-all`` copies every part again.
* ``add-table --merge-all`` adds the table on every leaf of the set, in one transaction.
* A queued script (``execute``) runs once in the database: a part whose sibling already ran
  the same file skips it (:func:`script_ran`).
* ``compare`` and ``repair`` leave merged tables alone: the table holds the other parts'
  rows, which repair would delete.
"""

from __future__ import annotations

import psycopg

from pgferry.errors import TableError, UsageError
from pgferry.node import model
from pgferry.registry import parts as parts_

COPIED = ("catching-up", "ok")  # a part in these states holds its rows in the table


def parts(conn: psycopg.Connection, node: model.NodeInfo) -> list[model.NodeInfo]:
    """The leaves of this database that feed ``node``'s merged set, ``node`` included, in
    queue order."""
    if node.combined_queue is None:
        raise UsageError(
            f"Node {node.node_name} is not a merge leaf (create-leaf --merge): no --merge-all"
        )
    rows = conn.execute(
        "select queue_name from ferry_node.node_info where combined_queue = %s order by 1",
        (node.combined_queue,),
    ).fetchall()
    found = [model.load_node(conn, r[0]) for r in rows]
    return [n for n in found if n is not None]


def _combined_queues(conn: psycopg.Connection) -> dict[str, str | None]:
    """Every node of the database: its queue -> the merged set it feeds (None: none)."""
    rows = conn.execute("select queue_name, combined_queue from ferry_node.node_info").fetchall()
    return {r[0]: r[1] for r in rows}


def is_merged(node: model.NodeInfo, attrs: dict) -> bool:
    """Whether a table with these table_attrs is merged on ``node``."""
    return node.combined_queue is not None and not attrs.get("no_merge")


def check_registration(
    conn: psycopg.Connection, node: model.NodeInfo, table: str, dest: str, no_merge: bool
) -> None:
    """A destination of a merge leaf is merged by every queue that registers it, or is one
    queue's own (``--no-merge``); anything else is refused."""
    if node.combined_queue is None:
        return
    combined_of = _combined_queues(conn)
    rows = [
        (e.queue_name, combined_of.get(e.queue_name), bool((e.table_attrs or {}).get("no_merge")))
        for e in parts_.registrations(conn, dest, besides=node.queue_name)
        if e.queue_name in combined_of
    ]
    for queue, combined, other_no_merge in rows:
        if no_merge or other_no_merge or combined != node.combined_queue:
            raise TableError(
                f"Table {dest} is also replicated by queue {queue}: merge conflict (a table"
                f" merged into {node.combined_queue} is fed by every part, one added with"
                " --no-merge by one queue only)"
            )


def others_hold(conn: psycopg.Connection, queue: str, dests: list[str]) -> list[str]:
    """Destinations that another queue's part holds rows of (its copy must not truncate)."""
    return parts_.held_elsewhere(conn, queue, dests, COPIED)


def lock_destinations(conn: psycopg.Connection, dests: list[str]) -> bool:
    """Session locks on merged destinations for one part's copy (released when the copy's
    session ends); False, holding none, when another part's copy holds one."""
    taken: list[str] = []
    for dest in sorted(set(dests)):
        row = conn.execute(
            "select pg_try_advisory_lock(hashtext('pgferry-merge'), hashtext(%s))", (dest,)
        ).fetchone()
        if not (row and row[0]):
            for done in taken:
                conn.execute(
                    "select pg_advisory_unlock(hashtext('pgferry-merge'), hashtext(%s))", (done,)
                )
            return False
        taken.append(dest)
    return True


def check_resync(
    conn: psycopg.Connection, node: model.NodeInfo, tables: list[str], merge_all: bool
) -> list[model.NodeInfo]:
    """The parts a resync of ``tables`` copies again: this node's alone, or with
    ``merge_all`` every part of the set that has them.  A single part of a merged table that
    other parts hold is refused."""
    if merge_all:
        return parts(conn, node)
    if node.combined_queue is None:
        return [node]
    rows = parts_.shared(conn, node.queue_name, tables, COPIED)
    if rows:
        table, queue = rows[0]
        raise TableError(
            f"Table {table} is merged with queue {queue}, which holds its rows: one part"
            " cannot be copied again without wiping the others' (resync --merge-all copies"
            " every part again)"
        )
    return [node]


def merged_tables(conn: psycopg.Connection, queue: str) -> set[str]:
    """The tables of ``queue`` merged here (none unless this node is a merge leaf)."""
    if _combined_queues(conn).get(queue) is None:
        return set()
    return parts_.mergeable(conn, queue)


def script_ran(conn: psycopg.Connection, queue: str, name: str, sha256: str) -> str | None:
    """The queue that already ran script ``name`` with this text in this database:
    ``queue`` itself or another part of its merged set; None when none has.  Waits, in the
    caller's transaction, for a part running it right now."""
    if parts_.script_ran(conn, [queue], name, sha256):
        return queue
    conn.execute(
        "select pg_advisory_xact_lock(hashtext('pgferry-merge-execute'), hashtext(%s))", (name,)
    )
    rows = conn.execute(
        """
        select o.queue_name from ferry_node.node_info o
          join ferry_node.node_info me on me.combined_queue = o.combined_queue
         where me.queue_name = %s and o.queue_name <> %s
        """,
        (queue, queue),
    ).fetchall()
    return parts_.script_ran(conn, [r[0] for r in rows], name, sha256)
