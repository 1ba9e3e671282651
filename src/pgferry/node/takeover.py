"""``takeover OLD_NODE``: the local branch takes the place of OLD_NODE.

Root, alive (switchover) — the local node NEW must read directly from OLD:

1. On OLD, in one transaction: pause its worker, swap the capture triggers of its tables for
   deny triggers (this waits for open writers, later writes fail), make a last tick T and
   switch its queue to external ticks.  No event can enter the cascade after T.
2. Wait until NEW has applied T, then pause NEW: both now hold the same data.
3. NEW becomes root (OLD's final sequence values applied, capture triggers, own ticker,
   its sequences published ahead, OLD registered as its subscriber at T) and OLD a branch
   below NEW at T, in two transactions committed back to back.
4. Resume both.  A failure before step 3 puts OLD back as it was.

With ``--all`` OLD's other subscribers are checked and caught up before step 1 (one that
cannot move refuses the whole takeover), stop at T in step 2 and move under NEW at T after
step 3: T is the one tick NEW surely holds (as a branch it may have read several of OLD's
ticks in one batch and never held those between).  The summary ends with what NEW needs:
the ticker daemon, and the sequence defaults it lacks.

Root, dead (failover, ``--dead-root`` / ``--dead``): OLD is tagged dead everywhere; if a
live branch under OLD got further than NEW, NEW first moves under it and catches up; NEW
becomes root at its position, its sequences moved ``seq_buffer`` values past the last value
published to it, and every other live subscriber of OLD is moved under NEW with
change-provider (one that is ahead of NEW cannot be and is reported).

Branch: NEW (if it reads from OLD) moves to OLD's provider; with ``--all`` or when OLD is
dead, OLD's other subscribers move under NEW; a live OLD finally moves under NEW.  Every
node that moves is paused first and its standing position checked: the takeover is refused
before any move when one stands on a tick NEW never held.
"""

from __future__ import annotations

import logging

import psycopg

from pgferry.errors import NodeError, PgferryError
from pgferry.node import capture, cascade, model, seqops, tableops, watermarks
from pgferry.node.cascade import Cascade, NodeView, set_paused
from pgferry.node.provider import change_provider, forget_subscriber
from pgferry.node.waits import (
    diverged_tick,
    missing_tick,
    queue_top,
    wait_applied,
    wait_tick_available,
)
from pgferry.queue import api as queue_api
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import catalog, entries

log = logging.getLogger(__name__)


def takeover(
    c: Cascade,
    old: str,
    *,
    dead: bool = False,
    dead_type: str | None = None,
    move_all: bool = False,
    timeout: float = 120.0,
    poll: float = 0.3,
) -> str:
    """Run on NEW (the local node); returns a one-line summary."""
    new = c.local.node_name
    c.member(old)
    buffer = seqops.seq_buffer(c.config)  # a bad setting stops before anything changes
    if old == new:
        raise NodeError(f"Node {new} cannot take over itself")
    me = c.view(new)
    if me.node_type != "branch":
        raise NodeError(f"Node {new} is a {me.node_type}: only a branch can take over")
    if dead or c.is_dead(old):
        if not c.member(old).dead:
            cascade.tag(c, old, True)
        c.assume_dead = c.assume_dead | {old}
        old_type = dead_type or _guess_dead_type(c)
        if old_type == "root":
            return _failover_root(c, old, buffer, timeout, poll)
        return _take_branch(c, old, None, True, timeout, poll)
    old_view = c.view(old)
    if old_view.node_type == "root":
        return _switchover_root(c, old_view, me, move_all, buffer, timeout, poll)
    if old_view.node_type == "branch":
        return _take_branch(c, old, old_view, move_all, timeout, poll)
    raise NodeError(f"Node {old} is a leaf: there is nothing to take over")


def _guess_dead_type(c: Cascade) -> str:
    """A dead node is a root when no live member is one."""
    views = c.survey()
    return "branch" if any(v.node_type == "root" for v in views.values()) else "root"


# --- switchover --------------------------------------------------------------------------
def _switchover_root(
    c: Cascade,
    old: NodeView,
    me: NodeView,
    move_all: bool,
    buffer: int,
    timeout: float,
    poll: float,
) -> str:
    new = me.name
    if me.provider != old.name:
        raise NodeError(
            f"Node {new} does not read from {old.name}: move it there first (change-provider)"
        )
    if me.paused:
        raise NodeError(f"Node {new} is paused: resume it first")
    tables = _check_tables(c, old.name, new)
    _check_seqs(c, old.name, new)
    lost_defaults = _lost_defaults(c, old.name, new, tables)
    # Every subscriber that moves is checked and caught up before the root is frozen: a
    # refusal here changes nothing, and their lag does not lengthen the write pause.
    movers = _movers(c, old.name, new, timeout, poll) if move_all else []
    tick, was_paused = _freeze_root(c, old.name, tables)
    log.info("Root %s frozen at tick %s", old.name, tick)
    held: list[str] = []  # movers paused here
    try:
        wait_applied(c, new, tick, timeout, poll)
        set_paused(c, new, True)
        wait_tick_available(c, new, tick, timeout, poll)
        # The frozen root makes no tick after T: each mover stops exactly at T, the one
        # tick the new root surely holds (a batch of the new root may have spanned the
        # tick a mover stood on, which the new root then never held).
        for name in movers:
            wait_applied(c, name, tick, timeout, poll)
            if set_paused(c, name, True):
                held.append(name)
    except BaseException as exc:
        _resume(c, held)
        set_paused(c, new, False)
        _unfreeze_root(c, old.name, tables, was_paused)
        if isinstance(exc, NodeError):
            raise NodeError(f"takeover refused, {old.name} restored as root: {exc}") from None
        raise
    promoted: list[bool] = []
    try:
        _swap_roles(c, old, me, tables, tick, buffer, promoted)
    except PgferryError as exc:
        _resume(c, held)
        set_paused(c, new, False)
        if promoted:
            # Two roots must never run: the old one stays frozen (no capture, no ticks).
            raise NodeError(
                f"Node {new} is root now but {old.name} could not be made its branch ({exc});"
                f" {old.name} stays frozen: tag-dead {old.name}, then drop-node or rebuild it"
            ) from None
        _unfreeze_root(c, old.name, tables, was_paused)
        raise
    set_paused(c, new, False)
    if not was_paused:
        set_paused(c, old.name, False)
    moved, stuck = _move_at(c, movers, new, tick, set(held), timeout, poll)
    text = f"Node {new} is now root; {old.name} is a branch below it (tick {tick})"
    if moved:
        text += f"; moved {', '.join(moved)}"
    text += "; " + _needs(c, new, lost_defaults)
    if stuck:
        # The swap cannot be undone any more; the nodes left read from the old root, now a
        # branch that keeps feeding them, and can be moved later.
        raise NodeError(
            f"{text}; NOT moved (they still read from {old.name}): {'; '.join(stuck)}"
            f" (change-provider --node=NODE --provider={new})"
        )
    return text


def _movers(c: Cascade, old: str, new: str, timeout: float, poll: float) -> list[str]:
    """The other live subscribers of root ``old`` (``--all``), refused together when one
    cannot move, then caught up with the root's newest tick."""
    views = c.survey()
    listed = {v.name for v in views.values() if v.provider == old}
    if old in views:
        listed |= {name for name, _ in views[old].subscribers if name in c.members}
    problems: list[str] = []
    movers: list[str] = []
    for name in sorted(listed - {new}):
        if c.is_dead(name):
            continue
        view = views.get(name)
        if view is None:
            problems.append(f"{name} is not reachable (tag-dead or drop-node it first)")
        elif view.provider != old:
            continue  # a stale subscriber row: that node reads elsewhere
        elif view.paused:
            problems.append(f"{name} is paused (resume it first)")
        elif view.last_tick is None:
            problems.append(f"{name} has no position yet")
        else:
            movers.append(name)
    if problems:
        raise NodeError(f"takeover --all refused, nothing changed: node {'; node '.join(problems)}")
    top = queue_top(c, old)
    try:
        for name in movers:
            if top is not None:
                wait_applied(c, name, top, timeout, poll)
    except NodeError as exc:
        raise NodeError(f"takeover --all refused, nothing changed: {exc}") from None
    return movers


def _resume(c: Cascade, names: list[str]) -> None:
    for name in names:
        try:
            set_paused(c, name, False)
        except PgferryError as exc:
            log.error("could not resume node %s: %s", name, exc)


def _move_at(
    c: Cascade,
    movers: list[str],
    new: str,
    tick: int,
    held: set[str],
    timeout: float,
    poll: float,
) -> tuple[list[str], list[str]]:
    """Move each mover (paused at ``tick``) under ``new``: (moved, 'name: why' not moved)."""
    moved: list[str] = []
    stuck: list[str] = []
    for name in movers:
        try:
            change_provider(c, name, new, timeout, poll)
            moved.append(name)
        except PgferryError as exc:
            log.error("Node %s not moved under %s at tick %s: %s", name, new, tick, exc)
            stuck.append(f"{name}: {exc}")
        finally:
            if name in held:
                _resume(c, [name])
    return moved, stuck


def _lost_defaults(c: Cascade, old: str, new: str, tables: list[str]) -> list[str]:
    """Columns whose default takes a sequence (or that are identity columns) on ``old`` and
    that have no default on ``new`` (``add-table --create`` leaves such defaults out):
    inserts relying on them fail on the new root."""
    lost: list[str] = []
    with c.on(old, autocommit=True) as old_conn, c.on(new, autocommit=True) as new_conn:
        for table in tables:
            _kept, by_sequence = catalog.column_defaults(old_conn, table)
            if not by_sequence:
                continue
            kept, mine = catalog.column_defaults(new_conn, table)
            lost += [f"{table}.{col}" for col in by_sequence if col not in kept and col not in mine]
    return lost


def _needs(c: Cascade, new: str, lost_defaults: list[str]) -> str:
    """What the new root needs from the operator: a ticker, and the defaults it lacks."""
    dbname = psycopg.conninfo.conninfo_to_dict(c.connstr(new)).get("dbname", "?")
    text = (
        f"its queue needs the ticker daemon now: make sure one runs for database {dbname}"
        " (pgferry PGQD.INI ticker, database_list empty or naming it)"
    )
    if lost_defaults:
        text += (
            f"; columns without the sequence default they have on the old root (inserts"
            f" relying on it fail on {new}): {', '.join(lost_defaults)}"
        )
    return text


def _check_tables(c: Cascade, old: str, new: str) -> list[str]:
    """Every table of OLD must be replicated whole, unrenamed and ok on NEW."""
    with c.on(old, autocommit=True) as conn:
        old_tables = [t.table_name for t in entries.list_tables(conn, c.queue)]
    with c.on(new, autocommit=True) as conn:
        mine = {t.table_name: t for t in entries.list_tables(conn, c.queue)}
    for name in old_tables:
        entry = mine.get(name)
        if entry is None:
            raise NodeError(f"Table {name} is not replicated on node {new}")
        if entry.merge_state != "ok":
            raise NodeError(f"Table {name} is not ok on node {new}: {entry.merge_state}")
        if entry.dest_table or entry.copy_condition:
            raise NodeError(f"Table {name} is renamed or partial on node {new}")
    return old_tables


def _check_seqs(c: Cascade, old: str, new: str) -> None:
    """Every sequence OLD publishes must be replicated on NEW, or NEW would hand out values
    OLD already did."""
    with c.on(old, autocommit=True) as conn:
        old_seqs = [s.seq_name for s in entries.list_seqs(conn, c.queue)]
    with c.on(new, autocommit=True) as conn:
        mine = {s.seq_name for s in entries.list_seqs(conn, c.queue)}
    missing = [name for name in old_seqs if name not in mine]
    if missing:
        raise NodeError(
            f"Sequence {', '.join(missing)} is not replicated on node {new} (add-seq it there)"
        )


def _freeze_root(c: Cascade, old: str, tables: list[str]) -> tuple[int, bool]:
    """Pause OLD, deny writes, make the last tick and stop its ticker: (tick, was paused)."""
    with c.on(old) as conn:
        node = model.require_node(conn, c.queue)
        state = model.local_state(conn, c.queue, node.worker_name)
        was_paused = bool(state and state.paused)
        _set_paused_in(conn, c.queue, node.worker_name, True)
        tableops.limit_lock_wait(c.config, conn)  # fail rather than block writers for long
        for table in tables:
            capture.attach(conn, c.queue, table, deny=True)
        queue_ticks.force_tick(conn, c.queue)
        tick = queue_ticks.tick(conn, c.queue)
        if tick is None:
            raise NodeError(f"Could not make a last tick on {old}")
        queue_api.set_external_ticker(conn, c.queue)
        return tick, was_paused


def _unfreeze_root(c: Cascade, old: str, tables: list[str], was_paused: bool) -> None:
    """Undo :func:`_freeze_root` after a failed switchover."""
    try:
        with c.on(old) as conn:
            node = model.require_node(conn, c.queue)
            queue_api.set_external_ticker(conn, c.queue, False)
            for table in tables:
                capture.attach(conn, c.queue, table, deny=False)
            if not was_paused:
                _set_paused_in(conn, c.queue, node.worker_name, False)
        log.info("Root %s restored", old)
    except PgferryError as exc:
        log.error("could not restore root %s: %s", old, exc)


def _swap_roles(
    c: Cascade,
    old: NodeView,
    me: NodeView,
    tables: list[str],
    tick: int,
    buffer: int,
    promoted: list[bool],
) -> None:
    """NEW becomes root and OLD its branch at ``tick``; NEW commits first (then
    ``promoted`` gets an entry)."""
    with c.on(old.name) as old_conn:
        tick_time = queue_ticks.tick_time(old_conn, c.queue, tick)
        # OLD takes no replicated write since its freeze committed: what its sequences
        # stand at now (or published, if higher) is the most it can have put in a table.
        final = seqops.final_values(old_conn, c.queue)
        with c.on(me.name) as new_conn:
            seqops.advance(new_conn, c.queue, final)
            published = _promote(
                new_conn, c.queue, me.worker_name, tables, [me.last_tick or tick, tick], buffer
            )
            queue_api.register_at(new_conn, c.queue, old.worker_name, tick)
            new_conn.execute(
                """
                insert into ferry_node.subscriber_info (queue_name, subscriber_node, worker_name)
                values (%s, %s, %s)
                on conflict (queue_name, subscriber_node)
                do update set worker_name = excluded.worker_name
                """,
                (c.queue, old.name, old.worker_name),
            )
            old_conn.execute(
                "update ferry_node.node_info set node_type = 'branch' where queue_name = %s",
                (c.queue,),
            )
            old_conn.execute(
                """
                update ferry_node.local_state
                   set provider_node = %s, last_tick_id = %s, last_tick_time = %s
                 where queue_name = %s and consumer_name = %s
                """,
                (me.name, tick, tick_time, c.queue, old.worker_name),
            )
            cascade.unregister_subscriber(old_conn, c.queue, me.name, me.worker_name)
        promoted.append(True)  # NEW has committed; OLD commits when its block ends.
    if final:
        log.info(
            "Sequences of %s at %s; %s published %s",
            old.name,
            seqops.listing(final),
            me.name,
            seqops.listing(published) or "nothing new",
        )


def _promote(
    conn: psycopg.Connection,
    queue: str,
    worker: str,
    tables: list[str],
    ticks: list[int],
    buffer: int,
) -> dict[str, int]:
    """Make the node of ``conn`` the root: type, no provider, own ticker, capture, and its
    sequences published ahead at once (not at its worker's next loop, which may be late);
    returns the values published."""
    conn.execute(
        "update ferry_node.node_info set node_type = 'root' where queue_name = %s", (queue,)
    )
    # A root keeps what its subscribers' positions and reports need, nothing more: the
    # hold of its days as a branch (the old root's global watermark) would keep old ticks
    # and stop rotation until its worker's next report. Read as a root's, it is dropped.
    watermarks.global_watermark(conn, queue)
    conn.execute(
        """
        update ferry_node.local_state set provider_node = null
         where queue_name = %s and consumer_name = %s
        """,
        (queue, worker),
    )
    queue_api.set_external_ticker(conn, queue, False)
    # Tick ids must keep growing past every tick any node has seen.
    queue_ticks.advance_tick_ids(conn, queue, max(ticks))
    for table in tables:
        capture.attach(conn, queue, table, deny=False)
    return seqops.publish_ahead(conn, queue, buffer)


def _set_paused_in(conn: psycopg.Connection, queue: str, worker: str, paused: bool) -> None:
    conn.execute(
        """
        update ferry_node.local_state set paused = %s
         where queue_name = %s and consumer_name = %s
        """,
        (paused, queue, worker),
    )


# --- failover ----------------------------------------------------------------------------
def _failover_root(c: Cascade, old: str, buffer: int, timeout: float, poll: float) -> str:
    new = c.local.node_name
    views = c.survey()
    me = views[new]
    others = [v for v in views.values() if v.provider == old and v.name != new]
    ahead = [
        v for v in others if v.node_type == "branch" and (v.last_tick or 0) > (me.last_tick or 0)
    ]
    if ahead:
        best = max(ahead, key=lambda v: v.last_tick or 0)
        log.info("Branch %s is further (tick %s): catching up from it", best.name, best.last_tick)
        change_provider(c, new, best.name, timeout, poll)
        wait_applied(c, new, best.last_tick or 0, timeout, poll)
    set_paused(c, new, True)
    try:
        me = c.view(new)
        with c.on(new) as conn:
            tables = [t.table_name for t in entries.list_tables(conn, c.queue)]
            top = max([v.last_tick or 0 for v in views.values()] + [me.last_tick or 0])
            # The dead root may have handed out values after its last publish that reached
            # us: it publishes again before it passes that value, so one buffer past it is
            # beyond anything it used unless more than one publish was lost with it.
            advanced = seqops.advance_past_published(conn, c.queue, buffer)
            _promote(conn, c.queue, me.worker_name, tables, [top], buffer)
    finally:
        set_paused(c, new, False)
    seq_text = ""
    if advanced:
        seq_text = (
            f"sequences advanced past the last published value + seq_buffer {buffer}:"
            f" {seqops.listing(advanced)}"
        )
        log.warning("Node %s: %s", new, seq_text)
    if me.provider is not None and me.provider != old:
        # NEW caught up from a sibling branch: that one must now read from NEW.
        forget_subscriber(c, me.provider, new, me.worker_name)
    moved, skipped, diverged = [], [], []
    for v in sorted(others, key=lambda v: v.name):
        current = c.view(v.name)
        if (current.last_tick or 0) > (me.last_tick or 0):
            log.warning(
                "Node %s is ahead of %s (tick %s > %s): not moved",
                v.name,
                new,
                current.last_tick,
                me.last_tick,
            )
            skipped.append(v.name)
            continue
        # The same tick id made at another time is another tick: moving the node there
        # would skip or repeat events under reused ids.
        error = (
            None
            if current.last_tick is None
            else diverged_tick(c, new, current.last_tick, current.last_tick_time, v.name)
        )
        if error is not None:
            log.warning("Node %s not moved under %s: %s", v.name, new, error)
            diverged.append(v.name)
            continue
        change_provider(c, v.name, new, timeout, poll)
        moved.append(v.name)
    text = f"Node {new} is now root in place of dead {old} (tick {me.last_tick})"
    if seq_text:
        text += f"; {seq_text}"
    if moved:
        text += f"; moved {', '.join(moved)}"
    if skipped:
        text += f"; not moved (ahead): {', '.join(skipped)}"
    if diverged:
        text += (
            f"; not moved (their last tick is another tick on {new}, a diverged provider):"
            f" {', '.join(diverged)}"
        )
    return text


# --- branches ----------------------------------------------------------------------------
def _take_branch(
    c: Cascade, old: str, old_view: NodeView | None, move_all: bool, timeout: float, poll: float
) -> str:
    new = c.local.node_name
    views = c.survey()
    me = views[new]
    upstream = old_view.provider if old_view else cascade._provider_of(views, old)[0]
    if upstream is None:
        raise NodeError(f"Provider of node {old} is unknown")
    movers = []
    if move_all or old_view is None:
        movers = sorted(v.name for v in views.values() if v.provider == old and v.name != new)
    if old_view is not None:
        movers.append(old)  # a live OLD moves under NEW last
    # Every node that moves is paused before its position is checked: a worker still
    # running could step, between the check and its move, onto a tick NEW never held,
    # and the takeover would stop half-way.  Those paused here are resumed at the end.
    paused: list[str] = []
    try:
        for name in movers:
            if set_paused(c, name, True):
                paused.append(name)
        _check_branch_movers(c, movers, new)
        if me.provider == old:
            change_provider(c, new, upstream, timeout, poll)
        for name in movers:
            change_provider(c, name, new, timeout, poll)
    finally:
        for name in paused:
            set_paused(c, name, False)
    moved = f"; moved {', '.join(movers)}" if movers else ""
    return f"Node {new} took the place of {old}{moved}"


def _check_branch_movers(c: Cascade, movers: list[str], new: str) -> None:
    """Refuse before any move when a node that moves under ``new`` (paused: its position
    stands) could not: one standing on a tick ``new`` read past in one batch (it never
    held it)."""
    problems: list[str] = []
    for name in movers:
        view = c.view(name)
        tick = view.last_tick
        if tick is not None:
            reason = missing_tick(c, new, tick)
            if reason is not None:
                problems.append(f"{name} cannot move: node {new} {reason}")
                continue
            diverged = diverged_tick(c, new, tick, view.last_tick_time, name)
            if diverged is not None:
                problems.append(f"{name} cannot move: {diverged}")
    if problems:
        raise NodeError(f"takeover refused, nothing changed: node {'; node '.join(problems)}")
