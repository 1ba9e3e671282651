"""Replication side by side: pgferry and the real Londiste 3, same workload, same machine.

For each system, on its own throw-away root + leaf cluster pair with its own ticker:

* initial copy of the four walkthrough tables through ``add-table`` on the leaf until all are
  ``ok``, on an idle queue and under the seed load, next to the raw psql pipe of the same rows;
  both start once the leaf worker is in its steady state, as a long-running worker is
  (pgferry: its Spark session is up; the wait is recorded as ``worker_ready_wait_s``);
* steady-state consumer lag under the seed load, sampled every second;
* catch-up: leaf worker stopped, seed load for BACKLOG_S seconds, final tick, worker started,
  time until the consumer's last tick reaches it; events/s = backlog events / time.  The same
  for native logical replication (``repl_native.py``: subscription disabled during the load).

After every phase the leaf is caught up and all four tables are compared (count + checksum).
Figures are printed as a table and written as JSON under ``bench/results/``.

    .venv/bin/python -m bench.replication_vs_londiste            # full run (~20-25 min)
    .venv/bin/python -m bench.replication_vs_londiste --quick    # 10 s phases, small tables
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import psycopg

from bench.common import (
    add_pgferry_setting,
    machine,
    one_line,
    pgferry_settings,
    result_head,
    write_results,
)
from bench.repl_env import BenchError, compare_sides, load_seed, make_pair
from bench.repl_native import run_native
from bench.repl_phases import Durations, catch_up, copy_tables, steady_lag
from bench.repl_report import print_report
from bench.repl_systems import RIGS, Rig, chosen_systems
from pgferry.errors import PgferryError

PHASES = ("copy-idle", "copy-busy", "lag", "catchup")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="10 s phases and small tables")
    p.add_argument("--backlog-s", type=int, help="seed load seconds for catch-up (60)")
    p.add_argument("--bench-s", type=int, help="seed load seconds for the lag phase (30)")
    p.add_argument("--base-rows", type=int, help="user_info / user_session rows (200000)")
    p.add_argument("--log-rows", type=int, help="rows per log table (232070)")
    p.add_argument("--phases", default=",".join(PHASES), help="comma list of " + ",".join(PHASES))
    p.add_argument("--skip-londiste", action="store_true")
    p.add_argument("--skip-pgferry", action="store_true")
    p.add_argument(
        "--skip-native",
        action="store_true",
        help="no native logical replication catch-up (run with the catchup phase)",
    )
    p.add_argument("--no-seqs", action="store_true", help="do not replicate the two sequences")
    p.add_argument(
        "--fast-clusters",
        action="store_true",
        help="fsync/synchronous_commit off (default: PostgreSQL's durable defaults)",
    )
    p.add_argument("--copy-timeout", type=int, default=300)
    p.add_argument("--catchup-timeout", type=int, default=600)
    p.add_argument(
        "--pgferry-verbose",
        action="store_true",
        help="run pgferry's leaf worker with -v (a log line per batch, Spark start time)",
    )
    add_pgferry_setting(p)
    p.add_argument("--keep", action="store_true", help="keep clusters and logs for inspection")
    p.add_argument("--out", type=Path, help="JSON result file (default bench/results/...)")
    args = p.parse_args(argv)
    quick = args.quick
    env = os.environ
    args.backlog_s = args.backlog_s or int(env.get("BACKLOG_S", 10 if quick else 60))
    args.bench_s = args.bench_s or int(env.get("BENCH_S", 10 if quick else 30))
    args.base_rows = args.base_rows or (20000 if quick else 200000)
    args.log_rows = args.log_rows or (20000 if quick else 232070)
    args.phases = [ph.strip() for ph in args.phases.split(",") if ph.strip()]
    unknown = sorted(set(args.phases) - set(PHASES))
    if unknown:
        p.error(f"unknown phase(s): {', '.join(unknown)}")
    return args


def run_system(name: str, args: argparse.Namespace, workroot: Path) -> dict:
    """Set up one system on a fresh cluster pair and run the chosen phases."""
    result: dict = {"phases": {}}
    workdir = workroot / name
    print(f"[{name}] clusters and seed data", flush=True)
    pair = make_pair(name, workdir, durable=not args.fast_clusters)
    rig: Rig | None = None
    durations = Durations(args.backlog_s, args.bench_s, args.copy_timeout, args.catchup_timeout)
    outdir = workdir / "out"
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        result["seed_rows"] = load_seed(pair, args.base_rows, args.log_rows)
        rig = RIGS[name](pair, workdir, with_seqs=not args.no_seqs, verbose=args.pgferry_verbose)
        if name == "pgferry":
            rig.leaf_settings = pgferry_settings(args)
        t0 = time.monotonic()
        rig.setup()
        result["setup_s"] = round(time.monotonic() - t0, 2)
        first_copy = True
        for phase in args.phases:
            print(f"[{name}] {phase}", flush=True)
            t0 = time.monotonic()
            log_at = rig.log_size()
            try:
                if phase in ("copy-idle", "copy-busy"):
                    res = copy_tables(
                        rig,
                        durations,
                        outdir,
                        busy=phase == "copy-busy",
                        add_seqs=first_copy and not args.no_seqs,
                    )
                    first_copy = False
                else:
                    if not rig.leaf_states():
                        # lag / catch-up without a copy phase: attach the tables, unmeasured
                        result["phases"]["prepare"] = copy_tables(
                            rig, durations, outdir, busy=False, add_seqs=not args.no_seqs
                        )
                        first_copy = False
                        log_at = rig.log_size()
                    run = steady_lag if phase == "lag" else catch_up
                    res = run(rig, durations, outdir)
            except Exception as exc:  # record the failure, keep the other phases going
                res = {"error": one_line(exc), "log_tail": rig.log_tail()}
                print(f"[{name}] {phase} FAILED: {res['error']}", flush=True)
                try:  # record how far apart the sides are, then go on
                    res["check"] = compare_sides(pair)
                except Exception as cexc:
                    res["check"] = {"error": str(cexc).splitlines()[0]}
            res["phase_wall_s"] = round(time.monotonic() - t0, 1)
            res["leaf_log"] = rig.log_since(log_at)
            result["phases"][phase] = res
            print(f"[{name}] {phase}: {_short(res)}", flush=True)
    except (BenchError, PgferryError, psycopg.Error, subprocess.SubprocessError) as exc:
        result["error"] = str(exc).splitlines()[0]
        result["log_tail"] = rig.log_tail() if rig else []
        print(f"[{name}] FAILED: {result['error']}", flush=True)
    finally:
        if rig is not None:
            rig.stop_all()
        pair.finish(args.keep, name, workdir)
    return result


def _short(res: dict) -> str:
    keys = (
        "error",
        "worker_ready_wait_s",
        "all_ok_s",
        "raw_pipe_s",
        "lag_median_s",
        "lag_p95_s",
        "lag_max_s",
        "catchup_s",
        "events_per_s",
    )
    parts = [f"{k}={res[k]}" for k in keys if k in res]
    check = res.get("check") or {}
    if "equal" in check:
        parts.append(f"equal={check['equal']}")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    systems = chosen_systems(args.skip_pgferry, args.skip_londiste)
    started = dt.datetime.now(dt.UTC)
    doc: dict = {
        **result_head("replication_vs_londiste", started, argv),
        "machine": machine(),
        "settings": {
            "backlog_s": args.backlog_s,
            "bench_s": args.bench_s,
            "base_rows": args.base_rows,
            "log_rows": args.log_rows,
            "phases": args.phases,
            "sequences": not args.no_seqs,
            "clusters": "fast (fsync off)" if args.fast_clusters else "PostgreSQL defaults",
            "quick": args.quick,
            "pgferry_worker_verbose": args.pgferry_verbose,
            "pgferry_settings": args.pgferry_setting,
        },
        "systems": {},
    }
    workroot = Path(tempfile.mkdtemp(prefix="pgferry-replbench-"))
    os.chmod(workroot, 0o755)
    try:
        for system in systems:
            try:
                doc["systems"][system] = run_system(system, args, workroot)
            except Exception as exc:  # an unexpected failure still leaves the other figures
                doc["systems"][system] = {
                    "error": f"{exc.__class__.__name__}: {exc}".splitlines()[0],
                    "traceback": traceback.format_exc().splitlines()[-6:],
                }
                print(f"[{system}] crashed: {doc['systems'][system]['error']}", flush=True)
        if "catchup" in args.phases and not args.skip_native:
            doc["systems"]["native"] = run_native(args, workroot)
    finally:
        if not args.keep:
            shutil.rmtree(workroot, ignore_errors=True)
    out = write_results(doc, "replication_vs_londiste", started, args.out)
    print_report(doc["systems"])
    print(f"\nraw results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
