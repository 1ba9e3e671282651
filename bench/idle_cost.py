"""What a replication set-up costs while nothing happens: CPU, rows written, WAL, commits.

:func:`measure_idle` samples, over one window in which no client writes, the CPU time of
the replication daemons (their own processes; their child processes such as a JVM are
counted apart), of the server backends serving them (every client backend of both
clusters except the benchmark's own connections), of the servers' replication processes
(walsender, logical replication workers) and of the other server processes; and from the
root's and leaf's statistics the rows inserted, updated and deleted (every table of the
replicated database, catalogs included), the commits and the WAL written.

CPU comes from ``/proc``: the sum of every thread's run time (``schedstat``, nanoseconds),
or ``utime + stime`` (10 ms clock ticks) where schedstat is missing.  Table statistics of a
backend reach the shared counters when it goes idle, at most every second and at the
latest ten seconds later; the counts of a window are therefore exact only up to what was
pending at its two ends, which cancel out in a steady state.  WAL bytes are exact.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

CLK_TCK = os.sysconf("SC_CLK_TCK")
# Server process kinds (pg_stat_activity.backend_type) that serve replication by themselves.
SERVER_REPLICATION = ("walsender", "logical replication worker", "logical replication launcher")


def cpu_seconds(pid: int) -> float | None:
    """CPU time used so far by process ``pid`` (all its threads), or None if it is gone."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        for task in tasks:
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                raise FileNotFoundError from None
        return total / 1e9
    except OSError:
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # utime and stime are fields 14 and 15 of stat; fields[0] here is field 3 (state).
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children(pid: int) -> list[int]:
    """Every process below ``pid``."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def postmaster_pid(datadir: Path) -> int:
    return int((datadir / "postmaster.pid").read_text().splitlines()[0])


@dataclass
class Side:
    """One cluster of the pair: a connection to the replicated database and its data dir."""

    name: str
    conn: psycopg.Connection
    datadir: Path
    own_pids: set[int] = field(default_factory=set)  # the benchmark's own backends


@dataclass
class Groups:
    """Process ids by what they do, fixed at the start of a window."""

    pids: dict[str, list[int]]
    names: dict[int, str] = field(default_factory=dict)  # backend pid: side:application_name

    def cpu(self) -> dict[int, float]:
        """CPU seconds so far of every process still running."""
        return {
            p: c for pids in self.pids.values() for p in pids if (c := cpu_seconds(p)) is not None
        }

    def used(self, before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
        """CPU used per group between two readings, by the processes present at both
        (one that exited meanwhile, such as a stopped JVM, is left out)."""
        return {
            group: round(sum(after[p] - before[p] for p in pids if p in before and p in after), 4)
            for group, pids in self.pids.items()
        }


def classify(sides: list[Side], daemons: dict[str, int]) -> Groups:
    """Daemons, their children, client backends, server replication processes, the rest."""
    groups: dict[str, list[int]] = {
        "daemons": [p for p in daemons.values() if cpu_seconds(p) is not None],
        "daemon_children": [c for p in daemons.values() for c in children(p)],
        "backends": [],
        "server_replication": [],
        "server_other": [],
    }
    names: dict[int, str] = {}
    for side in sides:
        rows = side.conn.execute(
            "select pid, backend_type, application_name from pg_stat_activity"
            " where pid <> pg_backend_pid()"
        ).fetchall()
        kinds = {pid: kind for pid, kind, _ in rows}
        names.update({pid: f"{side.name}:{app or kind}" for pid, kind, app in rows})
        for pid in children(postmaster_pid(side.datadir)):
            kind = kinds.get(pid)
            if pid in side.own_pids or pid == side.conn.info.backend_pid:
                continue
            if kind == "client backend":
                groups["backends"].append(pid)
            elif kind in SERVER_REPLICATION:
                groups["server_replication"].append(pid)
            else:
                groups["server_other"].append(pid)
        groups["server_other"].append(postmaster_pid(side.datadir))
    return Groups(groups, names)


def counters(side: Side) -> dict:
    """Rows written per table, commits and the WAL position of one cluster, now."""
    # One statement, so that the benchmark adds one transaction per reading.
    row = side.conn.execute(
        """
        select (select coalesce(json_object_agg(schemaname || '.' || relname,
                                                n_tup_ins + n_tup_upd + n_tup_del), '{}')
                  from pg_stat_all_tables where n_tup_ins + n_tup_upd + n_tup_del > 0),
               (select xact_commit from pg_stat_database where datname = current_database()),
               pg_current_wal_lsn() - '0/0'::pg_lsn
        """
    ).fetchone()
    assert row is not None
    return {
        "rows": {name: int(n) for name, n in row[0].items()},
        "commits": int(row[1] or 0),
        "wal": int(row[2]),
    }


def _delta(before: dict, after: dict) -> dict:
    tables = {
        name: n - before["rows"].get(name, 0)
        for name, n in after["rows"].items()
        if n - before["rows"].get(name, 0) > 0
    }
    return {
        "rows": sum(tables.values()),
        # Without the system catalogs: autovacuum's ANALYZE after a load writes
        # pg_statistic whatever replicates the tables.
        "rows_outside_catalog": sum(
            n for name, n in tables.items() if not name.startswith(("pg_catalog.", "pg_toast."))
        ),
        "rows_by_table": dict(sorted(tables.items(), key=lambda kv: -kv[1])),
        # Read-only transactions count too; the reading itself is one of them.
        "commits": after["commits"] - before["commits"] - 1,
        "wal_bytes": after["wal"] - before["wal"],
    }


def measure_idle(sides: list[Side], daemons: dict[str, int], seconds: float) -> dict:
    """Costs over ``seconds`` of idleness (the caller writes nothing meanwhile);
    ``daemons`` names the replication processes (name: pid)."""
    groups = classify(sides, daemons)
    before = {s.name: counters(s) for s in sides}
    cpu0 = groups.cpu()
    each0 = {name: cpu_seconds(pid) or 0.0 for name, pid in daemons.items()}
    backends0 = {pid: cpu_seconds(pid) or 0.0 for pid in groups.pids["backends"]}
    t0 = time.monotonic()
    time.sleep(seconds)
    cpu1 = groups.cpu()
    by_backend: dict[str, float] = {}
    for pid, before_s in backends0.items():
        name = groups.names.get(pid, str(pid))
        used = (cpu_seconds(pid) or before_s) - before_s
        by_backend[name] = round(by_backend.get(name, 0.0) + used, 4)
    each = {
        name: round((cpu_seconds(pid) or each0[name]) - each0[name], 4)
        for name, pid in daemons.items()
    }
    elapsed = time.monotonic() - t0
    after = {s.name: counters(s) for s in sides}
    cpu = groups.used(cpu0, cpu1)
    writes = {s.name: _delta(before[s.name], after[s.name]) for s in sides}
    return {
        "seconds": round(elapsed, 2),
        "cpu_s": cpu,
        # What the replication costs: the daemons, the backends serving them and the
        # server's own replication processes (native logical replication has no daemon).
        "replication_cpu_s": round(cpu["daemons"] + cpu["backends"] + cpu["server_replication"], 4),
        "cpu_by_daemon_s": each,
        "cpu_by_backend_s": by_backend,
        "processes": {g: len(p) for g, p in groups.pids.items()},
        "rows": sum(w["rows"] for w in writes.values()),
        "rows_outside_catalog": sum(w["rows_outside_catalog"] for w in writes.values()),
        "commits": sum(w["commits"] for w in writes.values()),
        "wal_bytes": sum(w["wal_bytes"] for w in writes.values()),
        "by_side": writes,
    }
