"""Resident memory of a leaf worker's whole process tree, pgferry and Londiste, in one run.

For each system, on its own throw-away root + leaf cluster pair (the replication
benchmark's set-up, ``bench/repl_systems.py``): seed data on the root, nodes, tickers and
workers started, the four walkthrough tables added on the root.  Then, sampling the leaf
worker's process and every process under it (pgferry's JVM and Spark's Python workers)
from ``/proc`` every 0.2 s:

1. **idle** — caught up, after IDLE_S seconds with nothing to do;
2. **copy** — ``add-table`` of the four tables on the leaf, until every one is ``ok``: the
   peak of the tree during the copy;
3. **idle after copy** — caught up again, after ``spark_idle_timeout`` (SPARK_IDLE_S) and
   IDLE_S more seconds: pgferry's Spark session has stopped with its JVM.

Each figure is the sum of VmRSS (resident, shared pages counted in each process: what
``ps`` shows) and of Pss (shared pages divided among the processes that share them: the
tree's real share of the machine), split by kind of process.  Londiste's worker runs as
the ``postgres`` OS user from Debian's packages, as in the replication benchmark.

    .venv/bin/python -m bench.worker_memory                      # both systems, ~6 min
    .venv/bin/python -m bench.worker_memory --skip-londiste --idle-s 10
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.common import RESULTS_DIR, machine, one_line
from bench.idle_cost import children
from bench.repl_env import TABLES, load_seed, make_pair, qualified
from bench.repl_systems import RIGS, Rig, chosen_systems
from pgferry.daemon import read_pid

SAMPLE_EVERY = 0.2  # seconds between samples of the tree during the copy
GOAL_IDLE_MB = 150  # a caught-up leaf worker, all its processes


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-rows", type=int, default=200_000, help="rows of the two base tables")
    p.add_argument("--log-rows", type=int, default=232_070, help="rows of the two log tables")
    p.add_argument("--idle-s", type=float, default=30, help="seconds idle before a sample")
    p.add_argument("--spark-idle-s", type=float, default=60, help="pgferry spark_idle_timeout")
    p.add_argument("--skip-pgferry", action="store_true")
    p.add_argument("--skip-londiste", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the clusters' work directory")
    return p.parse_args(argv)


# --- the process tree ---------------------------------------------------------------------


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it (Linux /proc)."""
    return [pid, *children(pid)]


def kind(pid: int, root: int) -> str:
    """worker, jvm, spark-python (Spark's Python worker daemon and its forks) or other."""
    if pid == root:
        return "worker"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    exe = Path(argv[0].decode(errors="replace")).name if argv else ""
    if exe == "java":
        return "jvm"
    if b"-m" in argv and any(a.endswith(b".daemon") for a in argv):
        return "spark-python"
    return "other"


def _kib(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def sample(pid: int) -> dict:
    """RSS and PSS of the tree in MB, in total and by kind."""
    rss: dict[str, float] = {}
    pss: dict[str, float] = {}
    procs: dict[str, int] = {}
    for p in tree(pid):
        k = kind(p, pid)
        rss[k] = rss.get(k, 0) + _kib(Path(f"/proc/{p}/status"), "VmRSS") / 1024
        pss[k] = pss.get(k, 0) + _kib(Path(f"/proc/{p}/smaps_rollup"), "Pss") / 1024
        procs[k] = procs.get(k, 0) + 1
    return {
        "rss_mb": round(sum(rss.values()), 1),
        "pss_mb": round(sum(pss.values()), 1),
        "rss_by_kind": {k: round(v, 1) for k, v in sorted(rss.items())},
        "pss_by_kind": {k: round(v, 1) for k, v in sorted(pss.items())},
        "processes": procs,
    }


# --- what the worker's own Python holds -----------------------------------------------------

IMPORTS = r"""
import json, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
steps = [("python", rss())]
def step(name, modules):
    for module in modules:
        __import__(module)
    steps.append((name, rss()))
step("psycopg", ["psycopg", "psycopg_pool"])
step("pglast, prometheus", ["pglast", "prometheus_client"])
import pgferry.cli.main as main
main.load_commands()
step("pgferry worker", ["pgferry.apply.worker", "pgferry.metrics.server", "pgferry.metrics.worker"])
step("pyspark + copy", ["pgferry.pipeline.spark", "pgferry.pipeline.copy"])
from pgferry.pipeline.spark import get_spark, stop_spark
session = get_spark(master="local[1]")
session.sparkContext.parallelize(range(2), 2).count()
steps.append(("a Spark job", rss()))
stop_spark(session)
steps.append(("Spark stopped", rss()))
assert not {"rich", "pandas", "pyarrow", "numpy"} & set(sys.modules)
step("(rich: not loaded)", ["rich.console", "rich.table"])
step("(pandas, pyarrow: not)", ["pandas", "pyarrow"])
print(json.dumps(steps))
"""


def import_costs() -> list[tuple[str, float, float]]:
    """RSS of a fresh Python as it loads what a worker loads: (step, MB after, MB added).

    The last two steps are what the worker no longer loads: rich (only commands that print
    a table on a terminal), and what PySpark loaded into every driver on its first Java
    call (see ``pgferry.pipeline.spark._skip_numpy_probe``).
    """
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1])
    steps = json.loads(proc.stdout.splitlines()[-1])
    out, before = [], steps[0][1]
    for name, mb in steps:
        out.append((name, round(mb, 1), round(mb - before, 1)))
        before = mb
    return out


# --- one system ---------------------------------------------------------------------------


def leaf_pid(rig: Rig) -> int:
    pid = read_pid(rig.leaf_pidfile)
    if pid is None:
        raise RuntimeError(f"{rig.name}: leaf worker has no pid file")
    return pid


def idle_sample(rig: Rig, seconds: float) -> dict:
    rig.wait_caught_up(120)
    time.sleep(seconds)  # the figure asked for is "after N seconds idle"
    return sample(leaf_pid(rig))


def copy_peak(rig: Rig, timeout: float = 900) -> dict:
    """add-table of the four tables on the leaf; the tree's peak until every one is ok."""
    pid = leaf_pid(rig)
    peak: dict = {"rss_mb": 0.0}
    started = time.monotonic()
    rig.leaf("add-table", *(qualified(t) for t in TABLES))
    while True:
        got = sample(pid)
        if got["rss_mb"] > peak["rss_mb"]:
            peak = got
        states = rig.leaf_states()
        if len(states) == len(TABLES) and all(s == "ok" for s in states):
            break
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{rig.name}: copy not done after {timeout:g} s: {states}")
        time.sleep(SAMPLE_EVERY)
    peak["copy_s"] = round(time.monotonic() - started, 1)
    return peak


def run_system(name: str, args: argparse.Namespace, workroot: Path) -> dict:
    workdir = workroot / name
    print(f"[{name}] clusters and seed data", flush=True)
    pair = make_pair(name, workdir, durable=False)
    rig: Rig | None = None
    result: dict = {}
    try:
        result["seed_rows"] = load_seed(pair, args.base_rows, args.log_rows)
        rig = RIGS[name](pair, workdir, with_seqs=False)
        rig.leaf_settings = {"spark_idle_timeout": f"{args.spark_idle_s:g}"}
        rig.setup()
        print(f"[{name}] idle", flush=True)
        result["idle"] = idle_sample(rig, args.idle_s)
        print(f"[{name}] copy", flush=True)
        result["copy"] = copy_peak(rig)
        print(f"[{name}] idle after the copy", flush=True)
        wait = args.idle_s + (args.spark_idle_s if name == "pgferry" else 0)
        result["idle_after_copy"] = idle_sample(rig, wait)
        result["idle_after_copy"]["idle_s"] = wait
    except Exception as exc:  # noqa: BLE001 - reported in the results, the other system runs
        result["error"] = one_line(exc)
        traceback.print_exc()
    finally:
        if rig is not None:
            rig.stop_all()
        pair.destroy()
    return result


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
    )
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    systems = chosen_systems(args.skip_pgferry, args.skip_londiste)
    report: dict = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": machine(),
        "load_average_at_start": os.getloadavg(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "systems": {},
    }
    if not args.skip_pgferry:
        try:
            report["pgferry_imports"] = import_costs()
        except (RuntimeError, subprocess.SubprocessError) as exc:  # an older pgferry
            report["pgferry_imports_error"] = one_line(exc)
    workroot = Path(tempfile.mkdtemp(prefix="pgferry-memory-"))
    if os.geteuid() == 0:
        shutil.chown(workroot, user="postgres")  # Londiste runs as postgres
    try:
        for name in systems:
            report["systems"][name] = run_system(name, args, workroot)
    finally:
        if not args.keep:
            shutil.rmtree(workroot, ignore_errors=True)
    report["load_average_at_end"] = os.getloadavg()
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"worker_memory_{dt.datetime.now():%Y%m%d_%H%M%S}.json"
    out.write_text(json.dumps(report, indent=2))
    print_report(report)
    print(f"results: {out}")
    return 0


def print_report(report: dict) -> None:
    print(f"\ncommit {report['commit']}, {report['date']}, load {report['load_average_at_start']}")
    header = f"{'system':10} {'phase':16} {'RSS MB':>8} {'PSS MB':>8}  RSS by kind"
    print(header)
    for name, res in report["systems"].items():
        if "error" in res:
            print(f"{name:10} error: {res['error']}")
            continue
        for phase in ("idle", "copy", "idle_after_copy"):
            got = res.get(phase)
            if got:
                kinds = ", ".join(f"{k} {v:g}" for k, v in got["rss_by_kind"].items())
                print(f"{name:10} {phase:16} {got['rss_mb']:8.1f} {got['pss_mb']:8.1f}  {kinds}")
    if report.get("pgferry_imports"):
        print("\npgferry worker's Python, step by step (RSS MB after, added):")
        for name, mb, added in report["pgferry_imports"]:
            print(f"  {name:20} {mb:7.1f} {added:+7.1f}")
    for name, res in report["systems"].items():
        idle = res.get("idle_after_copy")
        if idle:
            verdict = "met" if idle["rss_mb"] <= GOAL_IDLE_MB else "NOT met"
            mb = idle["rss_mb"]
            print(f"{name}: caught-up worker {mb:g} MB RSS, goal {GOAL_IDLE_MB} MB: {verdict}")


if __name__ == "__main__":
    sys.exit(main())
