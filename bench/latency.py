"""End-to-end latency and idle cost: pgferry, the real Londiste 3 and native logical replication.

For each system, on its own throw-away root + leaf cluster pair (PostgreSQL's durable
defaults, as in ``replication_vs_londiste.py``, whose set-up and seed load this reuses):

1. seed data and a probe table ``digoal_01.probe (id, at timestamptz)`` on both sides;
   replication of the four walkthrough tables, their two sequences and the probe set up
   and the tables copied (unmeasured). pgferry and Londiste run their own ticker and root
   and leaf workers; native logical replication is a publication of the five tables and a
   subscription on the leaf (sequences are not replicated by it).
2. **latency** — the seed load for BENCH_S seconds (60) and beside it one probe row every
   PROBE_MS (50 ms) on the root, ``at`` = ``clock_timestamp()`` of its insert (autocommit);
   the leaf is polled every POLL_MS (5 ms) for new probe rows, each seen at the poll's
   ``statement_timestamp()`` on the leaf. Latency = seen − at (one machine, one clock), so
   it includes the probe's own commit and at most one poll interval.  p50/p95/p99 over
   all probes.  Over the load's middle, the CPU of every process of both clusters and of
   the daemons (each backend by side and application name), the root's commits and the
   machine's busy CPUs: CPU per committed transaction holds on a loaded machine, where
   tps does not.  ``--stat-statements``: ``pg_stat_statements`` on both clusters and each
   side's statements that took longest over the same window (planning included).
3. **idle** — once the leaf has caught up, windows of IDLE_S seconds (30) in which
   nobody writes: one right after the load, and IDLE_WINDOWS (4) consecutive steady ones
   starting SETTLE_S (120) after the load ended, of which the medians are reported (and
   the totals: an idle queue ticks once a minute, so every other window holds a tick).
   For each: CPU of the daemons (ticker, root and leaf workers; for native LR the
   server's walsender and apply workers), of the backends serving them and of the rest of
   the servers; rows written, transactions and WAL on both clusters
   (``bench/idle_cost.py``); the consumer's lag as status shows it at the window's end.

Figures are printed and written as JSON under ``bench/results/``.

    .venv/bin/python -m bench.latency                       # full run (~15 min)
    .venv/bin/python -m bench.latency --quick               # small tables, short phases
    .venv/bin/python -m bench.latency --systems pgferry --bench-s 20 --settle-s 0
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import psycopg
from psycopg import sql

from bench.common import add_pgferry_setting, machine, pgferry_settings, result_head, write_results
from bench.idle_cost import Side, classify, cpu_seconds, measure_idle
from bench.repl_env import (
    SCHEMA,
    SEQUENCES,
    TABLES,
    BenchError,
    Load,
    Pair,
    compare_sides,
    load_seed,
    make_pair,
    qualified,
    wait_for,
)
from bench.repl_phases import READY_TIMEOUT_S, percentile, wait_ready
from bench.repl_systems import QUEUE, RIGS, LondisteRig, Rig
from pgferry.daemon import read_pid
from pgferry.db import connect

SYSTEMS = ("pgferry", "londiste", "native")
PROBE = "probe"
PROBE_SQL = f"create table {SCHEMA}.{PROBE} (id bigint primary key, at timestamptz not null)"
PUBLICATION = "bench_pub"
SUBSCRIPTION = "bench_sub"
# --stat-statements: the statements' execution and planning times, nested ones included.
STAT_STATEMENTS_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.track_planning": "on",
}
TOP_STATEMENTS = 15
GOAL_P95_S = 0.030  # latency p95 goal (0.2 s before 2026-11-27)
# pgferry's leaf worker with -v logs one line per batch (apply/worker.py _log_batch).
PGFERRY_BATCH = re.compile(
    r"batch \d+ tick \d+.*?: (\d+) upserts, (\d+) deletes, \d+ truncates in ([0-9.]+)s"
    r" \(summary ([0-9.]+)s, apply ([0-9.]+)s, commit ([0-9.]+)s\)"
)
LONDISTE_BATCH = re.compile(r"\{count: (\d+), duration: ([0-9.]+)")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--systems", default=",".join(SYSTEMS), help="comma list of " + ",".join(SYSTEMS)
    )
    p.add_argument("--quick", action="store_true", help="small tables, 15 s phases")
    p.add_argument("--bench-s", type=int, help="seconds of load with probes (60)")
    p.add_argument("--idle-s", type=int, help="seconds of each idle window (30)")
    p.add_argument(
        "--settle-s", type=int, help="steady idle window starts this long after the load (120)"
    )
    p.add_argument(
        "--idle-windows", type=int, default=4, help="steady idle windows, medians reported (4)"
    )
    p.add_argument("--probe-ms", type=float, default=50.0)
    p.add_argument("--poll-ms", type=float, default=5.0)
    p.add_argument("--base-rows", type=int)
    p.add_argument("--log-rows", type=int)
    p.add_argument("--no-load", action="store_true", help="probes only, without the seed load")
    p.add_argument("--keep", action="store_true", help="keep clusters and logs")
    p.add_argument(
        "--stat-statements",
        action="store_true",
        help="pg_stat_statements on both clusters: the top statements under load reported",
    )
    add_pgferry_setting(p)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    env = os.environ
    args.bench_s = args.bench_s or int(env.get("BENCH_S", 15 if args.quick else 60))
    args.idle_s = args.idle_s or int(env.get("IDLE_S", 15 if args.quick else 30))
    if args.settle_s is None:
        args.settle_s = int(env.get("SETTLE_S", 30 if args.quick else 120))
    args.base_rows = args.base_rows or (20000 if args.quick else 200000)
    args.log_rows = args.log_rows or (20000 if args.quick else 232070)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(args.systems) - set(SYSTEMS))
    if unknown:
        p.error(f"unknown system(s): {', '.join(unknown)}")
    return args


# --- the systems ------------------------------------------------------------------------------


class Trigger:
    """pgferry or Londiste through their command lines (``repl_systems``)."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.pair = rig.pair

    def attach(self) -> dict:
        rig = self.rig
        rig.setup()
        rig.root("add-table", qualified(PROBE))
        ready = wait_ready(rig, READY_TIMEOUT_S)
        rig.leaf("add-table", *(qualified(t) for t in (*TABLES, PROBE)))
        wait_for(
            "all tables ok on the leaf",
            lambda: (s := rig.leaf_states()) and len(s) == 5 and all(x == "ok" for x in s),
            600,
        )
        rig.leaf("add-seq", *(qualified(s) for s in SEQUENCES))
        self.caught_up(300)
        return ready

    def daemons(self) -> dict[str, int]:
        rig = self.rig
        files = {
            "ticker": rig.ticker_pidfile,
            "root worker": rig.root_pidfile,
            "leaf worker": rig.leaf_pidfile,
        }
        return {name: pid for name, f in files.items() if (pid := read_pid(f)) is not None}

    def caught_up(self, timeout: float) -> None:
        self.rig.wait_caught_up(timeout)

    def ticks_between(self, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
        rows = (
            self.pair.conn("root")
            .execute(
                self.rig._q(
                    "select t.tick_time from {q}.tick t join {q}.queue q"
                    " on q.queue_id = t.tick_queue where q.queue_name = %s"
                    " and t.tick_time between %s and %s order by t.tick_id"
                ),
                (QUEUE, start, end),
            )
            .fetchall()
        )
        return [r[0] for r in rows]

    def lag(self) -> float:
        return self.rig.consumer_position()[1]

    def batches(self, log_from: int) -> dict:
        lines = self.rig.log_since(log_from, keep=10**7)
        if isinstance(self.rig, LondisteRig):
            found = [(int(m[1]), float(m[2])) for m in map(LONDISTE_BATCH.search, lines) if m]
            if not found:
                return {}
            return {
                "batches": len(found),
                "events_median": statistics.median(c for c, _ in found),
                "seconds_median": statistics.median(s for _, s in found),
                "seconds_p95": percentile([s for _, s in found], 95),
            }
        rows = [m for m in map(PGFERRY_BATCH.search, lines) if m]
        if not rows:
            return {}
        col = {
            k: [float(m[i]) for m in rows]
            for i, k in enumerate(("ups", "dels", "total", "summary", "apply", "commit"), 1)
        }
        return {
            "batches": len(rows),
            "events_median": statistics.median(
                u + d for u, d in zip(col["ups"], col["dels"], strict=True)
            ),
            "seconds_median": round(statistics.median(col["total"]), 4),
            "seconds_p95": percentile(col["total"], 95),
            "summary_median": round(statistics.median(col["summary"]), 4),
            "apply_median": round(statistics.median(col["apply"]), 4),
            "commit_median": round(statistics.median(col["commit"]), 4),
        }

    def log_size(self) -> int:
        return self.rig.log_size()

    def stop(self) -> None:
        self.rig.stop_all()


class Native:
    """PostgreSQL's own logical replication: a publication and a subscription."""

    def __init__(self, pair: Pair) -> None:
        self.pair = pair

    def attach(self) -> dict:
        tables = sql.SQL(", ").join(sql.Identifier(SCHEMA, t) for t in (*TABLES, PROBE))
        self.pair.conn("leaf").execute(sql.SQL("truncate {}").format(tables))
        self.pair.conn("root").execute(
            sql.SQL("create publication {} for table {}").format(
                sql.Identifier(PUBLICATION), tables
            )
        )
        self.pair.conn("leaf").execute(
            sql.SQL("create subscription {} connection {} publication {}").format(
                sql.Identifier(SUBSCRIPTION),
                sql.Literal(self.pair.dsn("root")),
                sql.Identifier(PUBLICATION),
            )
        )
        wait_for(
            "subscription tables ready",
            lambda: (
                self.pair.scalar(
                    "leaf",
                    "select count(*) filter (where srsubstate = 'r') from pg_subscription_rel",
                )
                == 5
            ),
            600,
        )
        self.caught_up(300)
        return {}

    def daemons(self) -> dict[str, int]:
        return {}

    def caught_up(self, timeout: float) -> None:
        target = self.pair.scalar("root", "select pg_current_wal_lsn()")
        wait_for(
            "subscriber to confirm the root's WAL position",
            lambda: bool(
                self.pair.scalar(
                    "root",
                    "select coalesce(bool_and(replay_lsn >= %s::pg_lsn), false)"
                    " from pg_stat_replication",
                    (str(target),),
                )
            ),
            timeout,
            poll=0.05,
        )

    def ticks_between(self, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
        return []

    def lag(self) -> float | None:
        return self.pair.scalar(
            "root",
            "select extract(epoch from max(replay_lag))::float8 from pg_stat_replication",
        )

    def batches(self, log_from: int) -> dict:
        return {}

    def log_size(self) -> int:
        return 0

    def stop(self) -> None:
        leaf = self.pair.conn("leaf")
        leaf.execute(sql.SQL("drop subscription if exists {}").format(sql.Identifier(SUBSCRIPTION)))


# --- latency ----------------------------------------------------------------------------------


class Probes:
    """One probe row every ``every`` seconds on the root; the leaf polled for them."""

    def __init__(self, pair: Pair, every: float, poll: float) -> None:
        self.pair = pair
        self.every = every
        self.poll = poll
        self.written = 0
        self.insert_s: list[float] = []
        self.latency: dict[int, float] = {}
        self.polls = 0
        self.errors: list[str] = []
        self._stop_writing = threading.Event()
        self._stop_polling = threading.Event()
        self._writer = threading.Thread(target=self._write, daemon=True)
        self._poller = threading.Thread(target=self._read, daemon=True)

    def start(self) -> Probes:
        self._poller.start()
        self._writer.start()
        return self

    def _write(self) -> None:
        with connect(
            self.pair.dsn("root"), autocommit=True, application_name="bench-probe"
        ) as conn:
            start = conn.execute(
                sql.SQL("select coalesce(max(id), 0) from {}").format(sql.Identifier(SCHEMA, PROBE))
            ).fetchone()[0]
            query = sql.SQL("insert into {} (id, at) values (%s, clock_timestamp())").format(
                sql.Identifier(SCHEMA, PROBE)
            )
            self.first_id = start + 1
            next_at = time.monotonic()
            while not self._stop_writing.is_set():
                t0 = time.monotonic()
                conn.execute(query, (start + self.written + 1,))
                self.insert_s.append(time.monotonic() - t0)
                self.written += 1
                next_at += self.every
                self._stop_writing.wait(max(0.0, next_at - time.monotonic()))

    def _read(self) -> None:
        query = sql.SQL(
            "select extract(epoch from statement_timestamp() - at)::float8, id from {}"
            " where id > %s order by id"
        ).format(sql.Identifier(SCHEMA, PROBE))
        with connect(self.pair.dsn("leaf"), autocommit=True, application_name="bench-poll") as conn:
            last = conn.execute(
                sql.SQL("select coalesce(max(id), 0) from {}").format(sql.Identifier(SCHEMA, PROBE))
            ).fetchone()[0]
            while not self._stop_polling.is_set():
                try:
                    for lat, pid in conn.execute(query, (last,)).fetchall():
                        self.latency[pid] = lat
                        last = max(last, pid)
                    self.polls += 1
                except psycopg.Error as exc:
                    self.errors.append(str(exc).splitlines()[0])
                time.sleep(self.poll)

    def stop_writing(self) -> None:
        self._stop_writing.set()
        self._writer.join()

    def stop(self, timeout: float) -> None:
        wait_for("every probe on the leaf", lambda: len(self.latency) >= self.written, timeout)
        self._stop_polling.set()
        self._poller.join()


def latency_phase(
    system: Trigger | Native, args: argparse.Namespace, outdir: Path, tag: str
) -> dict:
    pair = system.pair
    log_from = system.log_size()
    started = pair.scalar("root", "select clock_timestamp()")
    probes = Probes(pair, args.probe_ms / 1000, args.poll_ms / 1000).start()
    load_res: dict = {}
    cpu: dict = {}
    try:
        if args.no_load:
            time.sleep(args.bench_s)
        else:
            load = Load(pair, args.bench_s, outdir, tag).start()
            cpu = load_cpu(pair, system.daemons(), args.bench_s)
            load_res = load.wait()
    finally:
        probes.stop_writing()
    ended = pair.scalar("root", "select clock_timestamp()")
    probes.stop(120)
    values = list(probes.latency.values())
    ticks = system.ticks_between(started, ended)
    gaps = [(b - a).total_seconds() for a, b in zip(ticks, ticks[1:], strict=False)]
    res = {
        "load": load_res,
        "probes": len(values),
        "probe_insert_median_s": round(statistics.median(probes.insert_s), 4),
        "p50_s": round(percentile(values, 50), 4),
        "p95_s": round(percentile(values, 95), 4),
        "p99_s": round(percentile(values, 99), 4),
        "max_s": round(max(values), 4),
        "min_s": round(min(values), 4),
        "mean_s": round(statistics.fmean(values), 4),
        "polls": probes.polls,
        "poll_errors": probes.errors[:3],
        "ticks": len(ticks),
        "tick_gap_median_s": round(statistics.median(gaps), 4) if gaps else None,
        "tick_gap_p95_s": round(percentile(gaps, 95), 4) if gaps else None,
        "apply": system.batches(log_from),
        "cpu_under_load": cpu,
        "raw_latency_s": [round(v, 4) for v in values],
    }
    return res


def load_cpu(pair: Pair, daemons: dict[str, int], bench_s: int) -> dict:
    """CPU seconds of every process of both clusters and of the replication daemons over
    the load's middle (from 2 s after its start to 1 s before its end), grouped as in
    ``bench/idle_cost.py`` and each backend by side and application name; the source's
    commits in the same window (CPU per committed transaction), and the whole machine's
    busy CPU (other work on the machine shows there)."""
    time.sleep(2.0)
    sides = [
        Side("root", pair.conn("root"), pair.root.datadir, set()),
        Side("leaf", pair.conn("leaf"), pair.leaf.datadir, set()),
    ]
    groups = classify(sides, daemons)
    backends = groups.pids["backends"] + groups.pids["server_replication"]
    statements = stat_statements(pair)
    for side in statements:
        pair.conn(side).execute("select public.pg_stat_statements_reset()")
    commits0 = pair.scalar(
        "root", "select xact_commit from pg_stat_database where datname = current_database()"
    )
    machine0 = machine_busy()
    cpu0 = {p: c for p in [*backends, *daemons.values()] if (c := cpu_seconds(p)) is not None}
    all0 = groups.cpu()
    t0 = time.monotonic()
    time.sleep(max(1.0, bench_s - 3.0))
    elapsed = time.monotonic() - t0
    all1 = groups.cpu()
    cpu1 = {p: c for p in cpu0 if (c := cpu_seconds(p)) is not None}
    machine1 = machine_busy()
    commits1 = pair.scalar(
        "root", "select xact_commit from pg_stat_database where datname = current_database()"
    )
    by_name: dict[str, float] = {}
    for pid in backends:
        if pid in cpu0 and pid in cpu1:
            name = groups.names.get(pid, str(pid))
            by_name[name] = by_name.get(name, 0.0) + cpu1[pid] - cpu0[pid]
    for name, pid in daemons.items():
        if pid in cpu0 and pid in cpu1:
            by_name[f"daemon:{name}"] = cpu1[pid] - cpu0[pid]
    top = {side: top_statements(pair, side) for side in statements}
    commits = int(commits1 - commits0)
    total = sum(all1[p] - all0[p] for p in all1 if p in all0)
    return {
        "seconds": round(elapsed, 2),
        "root_commits": commits,
        "groups_s": groups.used(all0, all1),
        "clusters_and_daemons_s": round(total, 3),
        "per_commit_ms": round(1000 * total / commits, 4) if commits else None,
        "by_process_s": {k: round(v, 3) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])},
        "machine_busy_cpus": round((machine1 - machine0) / elapsed, 3),
        "top_statements": top,
    }


def stat_statements(pair: Pair) -> list[str]:
    """The sides whose server loaded pg_stat_statements (the extension created there)."""
    sides = []
    for side in ("root", "leaf"):
        conn = pair.conn(side)
        if "pg_stat_statements" in (conn.execute("show shared_preload_libraries").fetchone()[0]):
            conn.execute("create extension if not exists pg_stat_statements schema public")
            sides.append(side)
    return sides


def top_statements(pair: Pair, side: str) -> list[dict]:
    """The statements of ``side`` that took the most time (execution + planning)."""
    rows = (
        pair.conn(side)
        .execute(
            "select calls, round((total_exec_time + total_plan_time)::numeric, 1),"
            " round(total_plan_time::numeric, 1), rows, left(regexp_replace(query, '\\s+', ' ',"
            " 'g'), 160), toplevel from public.pg_stat_statements"
            " where query not like '%%pg_stat_statements%%'"
            " order by total_exec_time + total_plan_time desc limit %s",
            (TOP_STATEMENTS,),
        )
        .fetchall()
    )
    return [
        {"calls": c, "ms": float(t), "plan_ms": float(p), "rows": r, "query": q, "top": top}
        for c, t, p, r, q, top in rows
    ]


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def check(system: Trigger | Native) -> dict:
    system.caught_up(300)
    res = compare_sides(system.pair)
    counts = [
        system.pair.scalar(
            side, sql.SQL("select count(*) from {}").format(sql.Identifier(SCHEMA, PROBE))
        )
        for side in ("root", "leaf")
    ]
    res["probe_rows"] = counts
    res["equal"] = res["equal"] and counts[0] == counts[1]
    return res


def idle_phase(system: Trigger | Native, args: argparse.Namespace, load_end: float) -> dict:
    pair = system.pair
    own = {s: {pair.conn(s).info.backend_pid} for s in ("root", "leaf")}
    sides = [
        Side("root", pair.conn("root"), pair.root.datadir, own["root"]),
        Side("leaf", pair.conn("leaf"), pair.leaf.datadir, own["leaf"]),
    ]
    out: dict = {}

    def window(start_at: float) -> dict:
        wait = load_end + start_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        t_start = pair.scalar("root", "select clock_timestamp()")
        res = measure_idle(sides, system.daemons(), args.idle_s)
        t_end = pair.scalar("root", "select clock_timestamp()")
        res["ticks"] = len(system.ticks_between(t_start, t_end))
        res["lag_at_end_s"] = system.lag()
        res["starts_after_load_s"] = round(start_at, 1)
        return res

    out["after_load"] = window(0.0)
    if args.settle_s > 0:
        windows = [window(args.settle_s + i * args.idle_s) for i in range(args.idle_windows)]
        out["steady"] = {**_medians(windows), "windows": windows}
    return out


def _medians(windows: list[dict]) -> dict:
    """The median of each figure over consecutive idle windows (an idle queue ticks once a
    minute, so one window holds a tick and the next may not)."""

    def med(get) -> float:
        return round(statistics.median(get(w) for w in windows), 4)

    first = windows[0]
    return {
        "seconds": first["seconds"],
        "cpu_s": {g: med(lambda w, g=g: w["cpu_s"][g]) for g in first["cpu_s"]},
        "replication_cpu_s": med(lambda w: w["replication_cpu_s"]),
        "cpu_by_daemon_s": {
            d: med(lambda w, d=d: w["cpu_by_daemon_s"].get(d, 0.0))
            for d in first["cpu_by_daemon_s"]
        },
        "rows": med(lambda w: w["rows"]),
        "rows_outside_catalog": med(lambda w: w.get("rows_outside_catalog", w["rows"])),
        "commits": med(lambda w: w["commits"]),
        "wal_bytes": med(lambda w: w["wal_bytes"]),
        "ticks": med(lambda w: w["ticks"]),
        "lag_at_end_s": windows[-1]["lag_at_end_s"],
        "totals": {
            "windows": len(windows),
            "replication_cpu_s": round(sum(w["replication_cpu_s"] for w in windows), 4),
            "daemons_cpu_s": round(sum(w["cpu_s"]["daemons"] for w in windows), 4),
            "rows": sum(w["rows"] for w in windows),
            "rows_outside_catalog": sum(w.get("rows_outside_catalog", w["rows"]) for w in windows),
            "ticks": sum(w["ticks"] for w in windows),
            "wal_bytes": sum(w["wal_bytes"] for w in windows),
        },
    }


# --- driver -----------------------------------------------------------------------------------


def run_system(name: str, args: argparse.Namespace, workroot: Path) -> dict:
    workdir = workroot / name
    outdir = workdir / "out"
    print(f"[{name}] clusters and seed data", flush=True)
    extra = {"wal_level": "logical"} if name == "native" else {}
    if args.stat_statements:
        extra.update(STAT_STATEMENTS_SETTINGS)
    pair = make_pair(name, workdir, extra=extra)
    outdir.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    system: Trigger | Native | None = None
    try:
        result["seed_rows"] = load_seed(pair, args.base_rows, args.log_rows)
        for side in ("root", "leaf"):
            pair.conn(side).execute(PROBE_SQL)
        if name == "native":
            system = Native(pair)
        else:
            rig = RIGS[name](pair, workdir, with_seqs=True, verbose=name == "pgferry")
            if name == "pgferry":
                rig.leaf_settings = pgferry_settings(args)
            system = Trigger(rig)
        t0 = time.monotonic()
        result["attach"] = system.attach()
        result["attach"]["seconds"] = round(time.monotonic() - t0, 1)
        print(f"[{name}] latency ({args.bench_s} s)", flush=True)
        result["latency"] = latency_phase(system, args, outdir, name)
        load_end = time.monotonic()
        lat = result["latency"]
        print(
            f"[{name}] latency p50 {lat['p50_s']} p95 {lat['p95_s']} p99 {lat['p99_s']}"
            f" max {lat['max_s']} s, {lat['probes']} probes, {lat['ticks']} ticks",
            flush=True,
        )
        cpu = lat.get("cpu_under_load") or {}
        if cpu:
            top = ", ".join(f"{k} {v}" for k, v in list(cpu["by_process_s"].items())[:8])
            print(
                f"[{name}] CPU under load {cpu['clusters_and_daemons_s']} s in"
                f" {cpu['seconds']} s, {cpu['per_commit_ms']} ms per root commit,"
                f" machine {cpu['machine_busy_cpus']} CPUs busy; {top}",
                flush=True,
            )
        result["check"] = check(system)
        print(f"[{name}] idle ({args.idle_s} s windows)", flush=True)
        result["idle"] = idle_phase(system, args, load_end)
        for window, res in result["idle"].items():
            print(
                f"[{name}] idle {window}: replication cpu {res['replication_cpu_s']} s"
                f" {res['cpu_s']}, rows {res['rows']}, commits {res['commits']},"
                f" wal {res['wal_bytes']} B, ticks {res['ticks']}, lag {res['lag_at_end_s']}",
                flush=True,
            )
    except (BenchError, psycopg.Error, subprocess.SubprocessError) as exc:
        result["error"] = str(exc).splitlines()[0]
        print(f"[{name}] FAILED: {result['error']}", flush=True)
    finally:
        if system is not None:
            result["leaf_log_tail"] = system.rig.log_tail(30) if isinstance(system, Trigger) else []
            try:
                system.stop()
            except Exception as exc:  # noqa: BLE001 - the clusters go anyway
                print(f"[{name}] stop: {exc}", flush=True)
        pair.finish(args.keep, name, workdir)
    return result


def report(systems: dict) -> None:
    names = list(systems)
    rows = [
        ("latency p50 (s)", lambda r: r["latency"]["p50_s"]),
        ("latency p95 (s)", lambda r: r["latency"]["p95_s"]),
        ("latency p99 (s)", lambda r: r["latency"]["p99_s"]),
        ("latency max (s)", lambda r: r["latency"]["max_s"]),
        ("probes", lambda r: r["latency"]["probes"]),
        ("source tps", lambda r: r["latency"]["load"].get("tps")),
        (
            "CPU under load, clusters + daemons (s)",
            lambda r: r["latency"].get("cpu_under_load", {}).get("clusters_and_daemons_s"),
        ),
        (
            "CPU per root commit (ms)",
            lambda r: r["latency"].get("cpu_under_load", {}).get("per_commit_ms"),
        ),
        (
            "machine busy CPUs under load",
            lambda r: r["latency"].get("cpu_under_load", {}).get("machine_busy_cpus"),
        ),
        ("ticks during load", lambda r: r["latency"]["ticks"]),
        ("tick gap median (s)", lambda r: r["latency"]["tick_gap_median_s"]),
        ("batch seconds median", lambda r: r["latency"]["apply"].get("seconds_median")),
        ("tables equal", lambda r: r["check"]["equal"]),
    ]
    for window in ("after_load", "steady"):
        rows += [
            (
                f"idle {window}: replication CPU (s)",
                lambda r, w=window: r["idle"][w]["replication_cpu_s"],
            ),
            (
                f"idle {window}: daemons CPU (s)",
                lambda r, w=window: r["idle"][w]["cpu_s"]["daemons"],
            ),
            (
                f"idle {window}: backends CPU (s)",
                lambda r, w=window: r["idle"][w]["cpu_s"]["backends"],
            ),
            (
                f"idle {window}: daemon children CPU (s)",
                lambda r, w=window: r["idle"][w]["cpu_s"]["daemon_children"],
            ),
            (
                f"idle {window}: server other CPU (s)",
                lambda r, w=window: r["idle"][w]["cpu_s"]["server_other"],
            ),
            (f"idle {window}: rows written", lambda r, w=window: r["idle"][w]["rows"]),
            (
                f"idle {window}: rows written outside pg_catalog",
                lambda r, w=window: r["idle"][w].get("rows_outside_catalog", "-"),
            ),
            (f"idle {window}: transactions", lambda r, w=window: r["idle"][w]["commits"]),
            (f"idle {window}: WAL bytes", lambda r, w=window: r["idle"][w]["wal_bytes"]),
            (f"idle {window}: ticks", lambda r, w=window: r["idle"][w]["ticks"]),
            (f"idle {window}: lag at end (s)", lambda r, w=window: r["idle"][w]["lag_at_end_s"]),
        ]
    rows += [
        (
            "idle steady, all windows: replication CPU (s)",
            lambda r: r["idle"]["steady"]["totals"]["replication_cpu_s"],
        ),
        (
            "idle steady, all windows: daemons CPU (s)",
            lambda r: r["idle"]["steady"]["totals"]["daemons_cpu_s"],
        ),
        ("idle steady, all windows: rows written", lambda r: r["idle"]["steady"]["totals"]["rows"]),
        (
            "idle steady, all windows: rows written outside pg_catalog",
            lambda r: r["idle"]["steady"]["totals"].get("rows_outside_catalog", "-"),
        ),
        ("idle steady, all windows: ticks", lambda r: r["idle"]["steady"]["totals"]["ticks"]),
        (
            "idle steady, all windows: WAL bytes",
            lambda r: r["idle"]["steady"]["totals"]["wal_bytes"],
        ),
    ]
    print()
    print("| figure | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for label, get in rows:
        cells = []
        for n in names:
            try:
                value = get(systems[n])
            except (KeyError, TypeError):
                value = "-"
            cells.append(f"{value:.4g}" if isinstance(value, float) else str(value))
        print(f"| {label} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if "londiste" in args.systems and not LondisteRig.available():
        print("Londiste not installed (/usr/bin/londiste, /usr/bin/pgqd): skipping it")
        args.systems.remove("londiste")
    started = dt.datetime.now(dt.UTC)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
    ).stdout.strip()
    doc: dict = {
        **result_head("latency", started, argv),
        "commit": commit,
        "loadavg_start": os.getloadavg(),
        "machine": machine(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "systems": {},
    }
    workroot = Path(tempfile.mkdtemp(prefix="pgferry-latency-"))
    os.chmod(workroot, 0o755)
    try:
        for name in args.systems:
            try:
                doc["systems"][name] = run_system(name, args, workroot)
            except Exception as exc:  # noqa: BLE001 - keep the other systems' figures
                doc["systems"][name] = {
                    "error": f"{exc.__class__.__name__}: {exc}".splitlines()[0],
                    "traceback": traceback.format_exc().splitlines()[-6:],
                }
                print(f"[{name}] crashed: {doc['systems'][name]['error']}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workroot, ignore_errors=True)
    doc["loadavg_end"] = os.getloadavg()
    out = write_results(doc, "latency", started, args.out)
    report(doc["systems"])
    print(f"\nload average: start {doc['loadavg_start']}, end {doc['loadavg_end']}")
    print(f"raw results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
