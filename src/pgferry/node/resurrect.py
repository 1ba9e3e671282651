"""``resurrect``: an old root that came back after a failover, made ready to rejoin.

After ``takeover --dead-root`` the cascade goes on from a new root, from the last tick P it
got from the old one; whatever the old root queued after P never reached it.  Run on the
old root, :func:`resurrect`

1. checks that the node is a root, that another live member is root now and has it
   tagged dead, and that the node's worker is not running (anything else is refused
   before a change);
2. finds P: a ``.<node>.gravestone`` hold on the new root when there is one, else the
   newest tick both queues hold with the same time and event position (a branch copies
   both from its provider, and the new root's own ticks never match), else the tick the
   new root was promoted at;
3. in one local transaction: deny triggers replace the capture triggers (later writes
   fail), the queue is cut back to P (the events after it come back from the cut), its
   subscribers and consumers are dropped, the node becomes a branch without provider at
   P, its member list becomes the new root's, and its tables wait for a fresh copy (the
   lost changes are in them; ``keep_tables`` leaves them as they are);
4. writes those events to a JSON file (format in ``docs/nodes.md``) and holds P on the new
   root, so that the node can rejoin there with ``change-provider`` whenever it does.

When the new root no longer holds P and the tables are copied again anyway, the node
rejoins from the new root's oldest usable tick instead (copied into its queue).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from pgferry.errors import NodeError, PgferryError
from pgferry.events import EVENT_COLUMN_NAMES
from pgferry.node import capture, cascade, model, tableops, watermarks
from pgferry.node.cascade import Cascade, NodeView
from pgferry.private_files import open_private
from pgferry.queue import api as queue_api
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import entries

log = logging.getLogger(__name__)

DUMP_FORMAT = "pgferry-lost-events 1"
DEFAULT_DUMP = "resurrect-lost-events.json"
ROW_OPS = ("I", "U", "D", "R")


@dataclass
class Resurrected:
    """What :func:`resurrect` did."""

    path: Path
    events: int
    lost_after: int  # the last tick the cascade got from this node
    tick: int  # where the node stands now (lost_after, unless that is gone on the new root)
    new_root: str
    copies: int  # tables waiting for a fresh copy
    stranded: list[str]  # live members still reading from this node


@dataclass
class _Plan:
    new_root: str
    members: list[model.Member]
    lost_after: int
    tick: int
    mark: tuple[datetime, int]  # time and event position of ``tick``
    stranded: list[str]


def resurrect(c: Cascade, dump: Path, *, keep_tables: bool = False) -> Resurrected:
    """Run on the old root (the local node); see the module docstring."""
    me = c.local.node_name
    if c.local.node_type != "root":
        raise NodeError(
            f"Node {me} is a {c.local.node_type}, not a root:"
            " resurrect is for an old root after a failover"
        )
    if dump.exists():
        raise NodeError(f"Dump file {dump} exists already: move it away or give --dump=PATH")
    if not dump.parent.is_dir():
        raise NodeError(f"Directory of the dump file does not exist: {dump.parent}")
    plan = _plan(c, keep_tables)

    written = held = False
    try:
        with c.on(me) as conn:
            copies, events = _demote(c, conn, plan, keep_tables)
            _write_dump(dump, _document(c.queue, me, plan, events))
            written = True
            held = _hold_on_new_root(c, plan)
        # Leaving the block committed the local transaction.
    except BaseException:
        if written:
            dump.unlink(missing_ok=True)
        if held:
            _release_on_new_root(c, plan)
        raise
    log.info("Node %s cut back to tick %s: %d lost events dumped", me, plan.lost_after, len(events))
    return Resurrected(
        dump, len(events), plan.lost_after, plan.tick, plan.new_root, copies, plan.stranded
    )


# --- what happened, before anything changes -----------------------------------------------
def _plan(c: Cascade, keep_tables: bool) -> _Plan:
    me = c.local.node_name
    views = c.survey(skip=frozenset({me}))
    new_root, members = _new_root(c, me, views)
    with c.on(me, autocommit=True) as conn:
        mine = queue_ticks.tick_marks(conn, c.queue)
    with c.on(new_root, autocommit=True) as conn:
        theirs = queue_ticks.tick_marks(conn, c.queue)
        holds = {r["consumer_name"]: r["last_tick"] for r in queue_api.consumer_info(conn, c.queue)}
        state = model.local_state(conn, c.queue, views[new_root].worker_name)
        lost_after = _gravestone(
            mine,
            theirs,
            holds.get(watermarks.gravestone_name(me)),
            state.last_tick_id if state else None,
        )
        if lost_after is None:
            raise NodeError(
                f"Cannot tell where the cascade left node {me}: root {new_root} holds no tick"
                " of its queue"
            )
        tick = lost_after
        if not queue_ticks.tick_usable(conn, c.queue, lost_after):
            oldest = queue_ticks.usable_ticks(conn, c.queue)[0]
            if keep_tables or oldest is None:
                raise NodeError(
                    f"Root {new_root} no longer holds tick {lost_after} where node {me} left"
                    " the cascade: resurrect without --keep-tables (the tables are then"
                    " copied again)"
                )
            tick = oldest  # the tables are copied again: any usable tick will do
    stranded = sorted(v.name for v in views.values() if v.provider == me)
    return _Plan(new_root, members, lost_after, tick, theirs[tick], stranded)


def _new_root(c: Cascade, me: str, views: dict[str, NodeView]) -> tuple[str, list[model.Member]]:
    """The live root that took this node's place, and its member list."""
    roots = sorted(v.name for v in views.values() if v.node_type == "root")
    if not roots:
        raise NodeError(
            f"Node {me} is the live root of the cascade (no other root found):"
            " there is nothing to resurrect"
        )
    for name in roots:
        with c.on(name, autocommit=True) as conn:
            members = model.members(conn, c.queue)
        if any(m.node_name == me and m.dead for m in members):
            return name, members
    raise NodeError(
        f"Node {roots[0]} is root too but does not have {me} tagged dead:"
        " no failover of this node happened"
    )


def _gravestone(
    mine: dict[int, tuple[datetime, int]],
    theirs: dict[int, tuple[datetime, int]],
    grave: int | None,
    promoted: int | None,
) -> int | None:
    """The last tick of this node's queue the cascade got (see the module docstring)."""
    if grave is not None and grave in mine:
        return grave
    same = [tick for tick, mark in mine.items() if theirs.get(tick) == mark]
    if same:
        return max(same)
    if promoted is not None and promoted in mine:
        return promoted
    return None


# --- the local change --------------------------------------------------------------------
def _demote(
    c: Cascade, conn: psycopg.Connection, plan: _Plan, keep_tables: bool
) -> tuple[int, list[tuple]]:
    """Everything of step 3 in the caller's transaction: (tables to copy, lost events)."""
    me = c.local.node_name
    # The worker's own lock, for this transaction: a root worker still running could queue
    # an event (a sequence value) after the cut, and none may start meanwhile.
    row = conn.execute(
        "select pg_try_advisory_xact_lock(hashtext('pgferry-worker'), hashtext(%s))",
        (c.queue,),
    ).fetchone()
    if not row or not row[0]:
        raise NodeError(f"The worker of node {me} is running: stop it, then resurrect")
    tableops.limit_lock_wait(c.config, conn)  # fail rather than queue behind writers
    node = model.require_node(conn, c.queue)
    if node.node_type != "root":
        raise NodeError(f"Node {me} is no longer a root (changed meanwhile)")
    tables = entries.list_tables(conn, c.queue)
    queue_api.set_external_ticker(conn, c.queue)
    for table in tables:
        capture.attach(conn, c.queue, table.dest_name, deny=True)
    events = queue_ticks.cut_after(conn, c.queue, plan.lost_after)
    for sub, worker in model.subscribers(conn, c.queue):
        cascade.unregister_subscriber(conn, c.queue, sub, worker)
    for consumer in queue_api.consumers(conn, c.queue):
        queue_api.unregister_consumer(conn, c.queue, consumer)
    if plan.tick != plan.lost_after:
        queue_ticks.external_tick(conn, c.queue, plan.tick, plan.mark[0], plan.mark[1])
    conn.execute(
        "update ferry_node.node_info set node_type = 'branch' where queue_name = %s", (c.queue,)
    )
    conn.execute(
        """
        update ferry_node.local_state
           set provider_node = null, last_tick_id = %s, last_tick_time = %s,
               cur_error = null, error_time = null
         where queue_name = %s and consumer_name = %s
        """,
        (plan.tick, plan.mark[0], c.queue, node.worker_name),
    )
    copies = 0
    if not keep_tables and tables:
        entries.resync_tables(conn, c.queue, [t.table_name for t in tables])
        copies = len(tables)
    names = [m.node_name for m in plan.members if m.node_name != me]
    conn.execute(
        """
        delete from ferry_node.node_location
         where queue_name = %s and node_name <> %s and node_name <> all(%s)
        """,
        (c.queue, me, names),
    )
    for member in plan.members:
        if member.node_name != me:
            model.register_location(
                conn, c.queue, member.node_name, member.node_location, member.dead
            )
    return copies, events


def _hold_on_new_root(c: Cascade, plan: _Plan) -> bool:
    """Keep the node's position on the new root until it rejoins; False when that root's
    schema has no watermarks (then nothing is held)."""
    me = c.local.node_name
    with c.on(plan.new_root) as conn:
        if not watermarks.supported(conn):
            log.warning("root %s has no watermarks (run install there)", plan.new_root)
            return False
        # Not a subscriber there yet: the hold is placed directly.
        queue_ticks.set_hold(conn, c.queue, watermarks.hold_name(me), plan.tick)
        queue_ticks.drop_hold(conn, c.queue, watermarks.gravestone_name(me))
    return True


def _release_on_new_root(c: Cascade, plan: _Plan) -> None:
    try:
        with c.on(plan.new_root) as conn:
            queue_ticks.drop_hold(conn, c.queue, watermarks.hold_name(c.local.node_name))
    except PgferryError as exc:
        log.warning("hold on root %s not removed: %s", plan.new_root, exc)


# --- the dump ----------------------------------------------------------------------------
def _document(queue: str, me: str, plan: _Plan, events: list[tuple]) -> dict[str, Any]:
    tables: dict[str, dict[str, int]] = {}
    other: dict[str, int] = {}
    rows = []
    for event in events:
        row = dict(zip(EVENT_COLUMN_NAMES, event, strict=True))
        ev_type = row["ev_type"] or ""
        op = ev_type.split(":", 1)[0]
        if op in ROW_OPS and row["ev_extra1"]:
            counts = tables.setdefault(row["ev_extra1"], dict.fromkeys(ROW_OPS, 0))
            counts[op] += 1
        else:
            other[ev_type] = other.get(ev_type, 0) + 1
        row["ev_time"] = row["ev_time"].isoformat() if row["ev_time"] else None
        rows.append(row)
    return {
        "format": DUMP_FORMAT,
        "queue": queue,
        "node": me,
        "new_root": plan.new_root,
        "last_tick": plan.lost_after,
        "dumped_at": datetime.now(UTC).isoformat(),
        "count": len(rows),
        "tables": tables,
        "other": other,
        "events": rows,
    }


def _write_dump(path: Path, document: dict[str, Any]) -> None:
    """Write the file; it must not exist (a second resurrect never overwrites the first's)."""
    try:
        out = open_private(path, exclusive=True)  # the lost events' rows: 0600
    except OSError as exc:
        raise NodeError(f"Cannot write dump file {path}: {exc.strerror or exc}") from None
    try:
        with out:
            json.dump(document, out, ensure_ascii=False, indent=1)
            out.write("\n")
    except BaseException as exc:
        path.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise NodeError(f"Cannot write dump file {path}: {exc.strerror or exc}") from None
        raise
