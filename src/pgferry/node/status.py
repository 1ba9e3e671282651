"""Gathering and drawing the cascade tree for ``status``.

Every member listed in the local ``node_location`` is asked for its own view (type, provider,
tick, error, table states, the divergence its replay repaired, whether its worker counts
as down, see :mod:`.worker_health`; on the root, whether its ticker counts as stopped, see
:mod:`.ticker_health`) through its public location, in parallel.  Dead members are not
contacted and unreachable ones are shown with the connection error, so ``status`` works
from any node even when parts of the cascade are down.  Each node's ``server`` is the
host:port that answered for it, read from the live connection: a location that names a
primary and its standbys (docs/nodes.md, "Connect strings for a highly available side")
shows in the tree which of them serves now.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from pgferry.config import Config
from pgferry.db import error_text, host_count, server_of
from pgferry.errors import PgferryError
from pgferry.node import connect, model, ticker_health, worker_health
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import entries
from pgferry.registry import refused as registry_refused

# Other nodes get a short connect timeout: status must not hang on a dead host.
REMOTE_TIMEOUT = 5
MAX_THREADS = 8


@dataclass
class NodeStatus:
    name: str
    node_type: str | None = None
    provider: str | None = None
    dead: bool = False
    reachable: bool = True
    tables_ok: int = 0
    tables_copying: int = 0
    tables_other: int = 0
    tick: int | None = None
    tick_time: datetime | None = None
    lag_seconds: float | None = None
    paused: bool = False
    error: str | None = None
    last_seen: datetime | None = None
    subscribers: list[str] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)  # "table: progress" of running copies
    # Rows replay found missing here (see sql/node/012_divergence.sql): re-created by an
    # update, or deletes that found nothing; since when, and where last.
    diverged_rows: int = 0
    diverged_deletes: int = 0
    diverged_since: datetime | None = None
    diverged_last: datetime | None = None
    diverged_tables: str | None = None
    # Root: events added since its newest tick, and the ticker's line when it counts as
    # stopped (no tick for ticker_stopped_after seconds while events wait).
    events_waiting: int | None = None
    ticker_stopped: str | None = None
    # The worker's line when it counts as down, or as silent (holds its lock, no heartbeat).
    worker_down: str | None = None
    worker_silent: str | None = None
    # Captured DDL events replay refused to run here (ferry.refused_event): how many, and
    # the last one's event id, name and reason.
    refused_ddl: int = 0
    refused_last: str | None = None
    # host:port of the server that answered for the node (of a location naming a primary
    # and its standbys, the one serving now), and whether its location names several.
    server: str | None = None
    several_hosts: bool = field(default=False, repr=False)
    # Rows the provider lost in a failover, saved here (ferry_node.lost_after_failover).
    lost_in_failover: int = 0
    now: datetime | None = field(default=None, repr=False)


@dataclass
class StatusReport:
    queue: str
    local_node: str
    nodes: list[NodeStatus]

    def by_name(self) -> dict[str, NodeStatus]:
        return {n.name: n for n in self.nodes}

    def problems(self) -> list[str]:
        """What a monitor must hear of, one phrase per node: unreachable, in error.  A node
        tagged dead (or named by ``--dead``) was left out on purpose and is not one."""
        found = []
        for n in self.nodes:
            if n.dead:
                continue
            if not n.reachable:
                found.append(f"{n.name} unreachable")
            elif n.error:
                found.append(f"{n.name} in ERR")
            if n.worker_down:
                found.append(f"worker of {n.name} down")
            if n.ticker_stopped:
                found.append(f"ticker of root {n.name} stopped")
        return found

    def to_json(self) -> dict[str, Any]:
        nodes = []
        for n in self.nodes:
            item = asdict(n)
            item.pop("now")
            item.pop("several_hosts")
            for key in ("tick_time", "last_seen", "diverged_since", "diverged_last"):
                if item[key] is not None:
                    item[key] = item[key].isoformat()
            nodes.append(item)
        return {
            "queue": self.queue,
            "local_node": self.local_node,
            "nodes": nodes,
            "problems": self.problems(),
        }


@dataclass(frozen=True)
class Thresholds:
    """Seconds after which the root's ticker counts as stopped and a worker as down or
    silent (:mod:`.ticker_health`, :mod:`.worker_health`), from the settings of ``config``."""

    stopped_after: float = ticker_health.STOPPED_AFTER
    down_after: float = worker_health.down_after(None)
    silent_after: float = worker_health.silent_after(None)

    @classmethod
    def of(cls, config: Config | None) -> Thresholds:
        return cls(
            ticker_health.stopped_after(config),
            worker_health.down_after(config),
            worker_health.silent_after(config),
        )


def read_node_status(
    conn: psycopg.Connection,
    queue: str,
    name: str,
    limits: Thresholds | None = None,
) -> NodeStatus:
    """The view one node has of itself."""
    limits = limits or Thresholds()
    node = model.load_node(conn, queue)
    if node is None:
        return NodeStatus(name=name, reachable=True, error="node not initialized here")
    st = NodeStatus(name=node.node_name, node_type=node.node_type, provider=node.provider_node)
    st.server = server_of(conn)
    counts = entries.table_counts(conn, queue)
    st.tables_ok, st.tables_copying, st.tables_other = counts.ok, counts.copying, counts.other
    now = conn.execute("select now()").fetchone()
    assert now is not None
    st.now = now[0]
    state = model.local_state(conn, queue, node.worker_name)
    if state is not None:
        st.tick, st.tick_time = state.last_tick_id, state.last_tick_time
        st.paused, st.error, st.last_seen = state.paused, state.cur_error, state.last_seen
    worker = worker_health.read(conn, queue)
    if worker is not None and worker.down(limits.down_after):
        st.worker_down = worker.line()
    elif worker is not None and worker.silent(limits.silent_after):
        st.worker_silent = worker.line()
    diverged = model.divergence(conn, queue, node.worker_name)
    if diverged is not None:
        st.diverged_rows, st.diverged_deletes = diverged.rows, diverged.deletes
        st.diverged_since, st.diverged_last = diverged.since, diverged.last
        st.diverged_tables = diverged.tables
    st.lost_in_failover = model.lost_in_failover(conn, queue)
    refused = registry_refused.refused(conn, queue)
    if refused is not None:
        st.refused_ddl, st.refused_last = refused.count, refused.last
    st.subscribers = [sub for sub, _ in model.subscribers(conn, queue)]
    st.copies = [
        f"{p.table_name}: {stalled_text(p) if st.worker_down else p.text()}"
        for p in entries.copy_progress(conn, queue)
        if p.merge_state in ("in-copy", "catching-up") or p.error
    ]
    if node.is_root:
        # The root's position is its queue's newest tick; its lag is the ticker's lag.
        st.tick, st.tick_time = queue_ticks.last_tick(conn, queue)
        ticker = ticker_health.read(conn, queue)
        if ticker is not None:
            st.events_waiting = ticker.waiting
            if ticker.stopped(limits.stopped_after):
                st.ticker_stopped = ticker.line()
    return st


def _remote_status(config: Config, queue: str, member: model.Member) -> NodeStatus:
    if member.dead:
        return NodeStatus(name=member.node_name, dead=True, reachable=False)
    try:
        with connect.connect_remote(
            config, member.node_location, autocommit=True, connect_timeout=REMOTE_TIMEOUT
        ) as conn:
            st = read_node_status(conn, queue, member.node_name, Thresholds.of(config))
    except PgferryError as exc:
        return NodeStatus(name=member.node_name, reachable=False, error=str(exc))
    except psycopg.Error as exc:
        return NodeStatus(name=member.node_name, reachable=False, error=error_text(exc))
    st.name = member.node_name
    st.several_hosts = host_count(member.node_location) > 1
    return st


def gather(
    config: Config, conn: psycopg.Connection, assume_dead: frozenset[str] = frozenset()
) -> StatusReport:
    """Status of every member, the local node read through ``conn``.

    ``assume_dead`` names nodes to treat as dead for this call only (``--dead``).
    """
    queue = connect.queue_name(config)
    local = model.require_node(conn, queue)
    local_status = read_node_status(conn, queue, local.node_name, Thresholds.of(config))
    local_status.several_hosts = host_count(connect.local_connstr(config)) > 1
    others = [
        model.Member(m.node_name, m.node_location, m.dead or m.node_name in assume_dead)
        for m in model.members(conn, queue)
        if m.node_name != local.node_name
    ]
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_THREADS, len(others)))) as pool:
        remote = list(pool.map(lambda m: _remote_status(config, queue, m), others))
    nodes = [local_status, *remote]
    _place_unreached(nodes)
    _fill_lag(nodes)
    return StatusReport(queue=queue, local_node=local.node_name, nodes=nodes)


def stalled_text(p: entries.CopyProgress) -> str:
    """A copy's progress while the worker is down: how far it got, no rate or ETA."""
    if p.error and p.merge_state != "catching-up":
        return p.text()  # the failure says more
    return f"stalled at {p.rows:,} rows, worker down"


def _place_unreached(nodes: list[NodeStatus]) -> None:
    """A dead or unreachable node is drawn under the live node that lists it as subscriber."""
    for n in nodes:
        if n.node_type is None and n.provider is None:
            n.provider = next((p.name for p in nodes if n.name in p.subscribers), None)


def _fill_lag(nodes: list[NodeStatus]) -> None:
    """Root: time since its last tick.  Others: how far their tick is behind the root's."""
    root = next((n for n in nodes if n.node_type == "root" and n.tick_time), None)
    for n in nodes:
        if n.tick_time is None or n.now is None:
            continue
        if n.node_type != "root" and root is not None and root.tick_time is not None:
            n.lag_seconds = max(0.0, (root.tick_time - n.tick_time).total_seconds())
        else:
            n.lag_seconds = max(0.0, (n.now - n.tick_time).total_seconds())


def format_lag(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _info_lines(n: NodeStatus) -> list[str]:
    lines = []
    if n.dead:
        lines.append("Node is marked dead")
    elif n.reachable:
        if n.several_hosts and n.server:
            lines.append(f"Server: {n.server}")
        lines.append(f"Tables: {n.tables_ok}/{n.tables_copying}/{n.tables_other}")
        lines.append(
            f"Lag: {format_lag(n.lag_seconds)}, Tick: {n.tick if n.tick is not None else '?'}"
        )
        if n.ticker_stopped:
            lines.append(f"TICKER STOPPED: {n.ticker_stopped}")
        if n.worker_down:
            lines.append(f"WORKER DOWN: {n.worker_down}")
        elif n.worker_silent:
            lines.append(f"Worker silent: {n.worker_silent}")
        if n.paused:
            lines.append("PAUSED")
        lines += [f"Copy {line}" for line in n.copies]
        if n.diverged_rows or n.diverged_deletes:
            lines.append(divergence_line(n))
        if n.refused_ddl:
            lines.append(f"Refused captured DDL: {n.refused_ddl}, last {n.refused_last}")
        if n.lost_in_failover:
            lines.append(
                f"LOST: {n.lost_in_failover} rows lost in a provider's failover"
                " (ferry_node.lost_after_failover)"
            )
    if n.error:
        lines.append(f"ERR: {n.error}")
    return lines


def divergence_line(n: NodeStatus) -> str:
    """'Diverged: 3 rows re-created, 1 delete of a missing row (since ..., last in ...)'."""
    parts = []
    if n.diverged_rows:
        parts.append(f"{n.diverged_rows} row{'s' if n.diverged_rows != 1 else ''} re-created")
    if n.diverged_deletes:
        what = "delete of a missing row" if n.diverged_deletes == 1 else "deletes of missing rows"
        parts.append(f"{n.diverged_deletes} {what}")
    when = []
    if n.diverged_since is not None:
        when.append(f"since {n.diverged_since.isoformat(sep=' ', timespec='seconds')}")
    if n.diverged_tables:
        when.append(f"last in {n.diverged_tables}")
    return f"Diverged: {', '.join(parts)}" + (f" ({', '.join(when)})" if when else "")


def render_tree(report: StatusReport) -> str:
    """The original's layout: one block per node, children drawn under their provider."""
    nodes = report.by_name()
    children: dict[str | None, list[str]] = {}
    for n in report.nodes:
        parent = n.provider if n.provider in nodes and n.node_type != "root" else None
        children.setdefault(parent, []).append(n.name)
    for names in children.values():
        names.sort(key=lambda name: (nodes[name].node_type != "root", name))
    out = [f"Queue: {report.queue}   Local node: {report.local_node}", ""]
    width = max(len(n.name) + len(n.node_type or "?") for n in report.nodes) + 12

    def title(n: NodeStatus) -> str:
        tag = n.node_type or "?"
        extra = " dead" if n.dead else "" if n.reachable else " unreachable"
        return f"{n.name} ({tag}{extra})"

    def draw(name: str, prefix: str, is_last: bool, top: bool) -> None:
        n = nodes[name]
        kids = children.get(name, [])
        if top:
            out.append(title(n))
            info_prefix = "  " if not kids else "  |"
        else:
            out.append(f"{prefix}+--: {title(n)}")
            base = prefix + ("     " if is_last else "|    ")
            info_prefix = base + ("|" if kids else "")
        for line in _info_lines(n):
            out.append(f"{info_prefix.ljust(width)}{line}")
        child_prefix = "  " if top else prefix + ("     " if is_last else "|    ")
        for i, kid in enumerate(kids):
            draw(kid, child_prefix, i == len(kids) - 1, False)

    seen: set[str] = set()
    for i, name in enumerate(children.get(None, [])):
        if i:
            out.append("")
        draw(name, "", True, True)
        seen.add(name)
    return "\n".join(out)
