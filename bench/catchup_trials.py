"""Catch-up trials on one backlog: the same events replayed again and again, by variant.

Each run of :mod:`bench.replication_vs_londiste` builds a new backlog, and the seed load's
rate (so the backlog) varies by a fifth from run to run; two settings of the replay are
hard to tell apart that way.  This script builds pgferry's root and leaf once (the
walkthrough's schema and seed rows, the four tables attached), stops the leaf worker,
runs the seed load for ``--backlog-s`` seconds with the ticker, stops the ticker and
the root worker, and keeps a copy of both data directories.  Each trial then restores
that copy, starts both servers, loads the event table and the leaf's tables into shared
buffers (``pg_prewarm``, as they are when a catch-up follows the load), starts the leaf
worker (``-v -d worker``) and times it until its consumer has the backlog's last tick.
It also reports the CPU that each server's backends used (their postmaster's children,
counted once they have exited) and checks that both sides are equal.

A variant is ``NAME:key=value,key=value``: settings of the leaf's ini (``NAME:`` alone is
the default configuration).  Trials alternate between the variants, round after round::

    PYTHONPATH=src .venv/bin/python -m bench.catchup_trials --rounds 6 \\
        --variant default: --variant whole:replay_read_range_events=1000000

``--source NAME=DIR`` runs variant NAME's leaf worker from another checkout's ``src``
(e.g. a ``git worktree`` of an earlier commit), so that two versions of the code replay the
same backlog.  The backlog itself is always built with this checkout.
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import psycopg

from bench.common import machine, one_line, result_head, write_results
from bench.repl_env import (
    BenchError,
    Pair,
    compare_sides,
    load_seed,
    make_pair,
    run_load,
    wait_for,
)
from bench.repl_phases import Durations, copy_tables
from bench.repl_systems import PgferryRig
from pgferry.daemon import pid_alive, read_pid
from pgferry.errors import PgferryError

FIGURES = ("catchup_s", "worker_start_cmd_s", "root_backends_cpu_s", "leaf_backends_cpu_s")
PREWARM = {
    "root": ("ferry_queue.event",),
    "leaf": ("digoal_01.user_session", "digoal_01.user_login_rec", "digoal_01.user_logout_rec"),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backlog-s", type=int, default=60, help="seconds of seed load")
    p.add_argument("--rounds", type=int, default=6, help="trials of each variant")
    p.add_argument("--variant", action="append", default=[], help="NAME:key=value,...")
    p.add_argument("--source", action="append", default=[], help="NAME=DIR: a variant's src")
    p.add_argument("--out", type=Path, help="JSON result file (default bench/results/...)")
    p.add_argument("--keep-log", type=Path, help="copy the leaf worker's log (every trial's) here")
    args = p.parse_args(argv)
    args.variants = [_variant(text, p) for text in args.variant or ["default:"]]
    names = {name for name, _ in args.variants}
    args.sources = {}
    for text in args.source:
        name, sep, where = text.partition("=")
        src = Path(where).resolve()
        if not sep or name not in names or not (src / "pgferry").is_dir():
            p.error(f"--source is NAME=DIR (a variant and a src with pgferry/): {text!r}")
        args.sources[name] = src
    return args


def _variant(text: str, p: argparse.ArgumentParser) -> tuple[str, dict[str, str]]:
    name, sep, rest = text.partition(":")
    settings = dict(kv.split("=", 1) for kv in rest.split(",") if "=" in kv)
    if not sep or not name or len(settings) != len([kv for kv in rest.split(",") if kv]):
        p.error(f"a variant is NAME:key=value,key=value, not {text!r}")
    return name, settings


def children_cpu(pair: Pair, side: str) -> float:
    """CPU seconds of the server's exited backends so far (its postmaster's children)."""
    cluster = pair.root if side == "root" else pair.leaf
    pid = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def build_backlog(
    rig: PgferryRig, pair: Pair, backlog_s: int, snapshot: Path
) -> tuple[int, int | None]:
    """The backlog: (its last tick, its events); both data directories copied to
    ``snapshot``."""
    durations = Durations(backlog_s, 30, 600, 600)
    outdir = rig.dir / "out"
    outdir.mkdir(exist_ok=True)
    copy_tables(rig, durations, outdir, busy=False, add_seqs=True)
    rig.stop_leaf()
    run_load(pair, backlog_s, outdir, "backlog")
    target = rig.force_tick()
    events = rig.pending_events()
    ticker = read_pid(rig.ticker_pidfile)
    rig.stop_all()  # the ticker and the root worker: nothing changes during the trials
    if ticker is not None:
        wait_for("ticker exit", lambda: not pid_alive(ticker), 60)
    pair.close()
    snapshot.mkdir()
    for side, cluster in (("root", pair.root), ("leaf", pair.leaf)):
        cluster.stop()
        _copy_tree(cluster.datadir, snapshot / side)
    return target, events


def _copy_tree(src: Path, dst: Path) -> None:
    # cp -a keeps the owner: the servers run as their own user.
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


def trial(
    rig: PgferryRig,
    pair: Pair,
    snapshot: Path,
    target: int,
    settings: dict,
    source: Path | None = None,
) -> dict:
    for side, cluster in (("root", pair.root), ("leaf", pair.leaf)):
        cluster.stop("immediate")
        shutil.rmtree(cluster.datadir)
        _copy_tree(snapshot / side, cluster.datadir)
        cluster.start()
    for side, tables in PREWARM.items():
        conn = pair.conn(side)
        conn.execute("create extension if not exists pg_prewarm")
        for table in tables:
            conn.execute(
                # The table, its partitions and their indexes (those that have storage).
                "select pg_prewarm(c.oid) from pg_class c where c.relkind in ('r', 'i')"
                " and (c.oid = %s::regclass or c.oid in (select inhrelid from pg_inherits"
                " where inhparent = %s::regclass) or c.oid in (select i.indexrelid from"
                " pg_index i join pg_inherits h on i.indrelid in (h.inhrelid, h.inhparent)"
                " where h.inhparent = %s::regclass) or c.oid in (select indexrelid"
                " from pg_index where indrelid = %s::regclass))",
                (table, table, table, table),
            )
    rig.leaf_settings = {"spark_warm": "false", **settings}
    rig.write_configs()
    cpu0 = {side: children_cpu(pair, side) for side in ("root", "leaf")}
    # The daemon keeps the environment it starts with: its PYTHONPATH picks the code.
    with mock.patch.dict(os.environ, {"PYTHONPATH": str(source)} if source else {}):
        t0 = time.monotonic()
        rig.start_leaf()
        started = time.monotonic() - t0
    wait_for("catch-up", lambda: rig.reached(target), 600, poll=0.02)
    elapsed = time.monotonic() - t0
    rig.stop_leaf()
    pair.close()  # the bench's own backends exit too: their CPU is counted once they have
    time.sleep(0.5)
    cpu = {side: round(children_cpu(pair, side) - cpu0[side], 2) for side in cpu0}
    check = compare_sides(pair)
    pair.close()
    return {
        "worker_start_cmd_s": round(started, 3),
        "catchup_s": round(elapsed, 3),
        "root_backends_cpu_s": cpu["root"],
        "leaf_backends_cpu_s": cpu["leaf"],
        "equal": check["equal"],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = dt.datetime.now(dt.UTC)
    doc: dict = {
        **result_head("catchup_trials", started, argv),
        "machine": machine(),
        "variants": dict(args.variants),
        "sources": {name: str(src) for name, src in args.sources.items()},
        "trials": [],
    }
    for src in args.sources.values():
        compileall.compile_dir(src, quiet=1)  # as machine() does for this checkout
    workdir = Path(tempfile.mkdtemp(prefix="pgferry-trials-"))
    pair = make_pair("trials", workdir / "pgferry")
    rig = PgferryRig(pair, workdir / "pgferry", verbose=True)
    try:
        load_seed(pair, 200000, 232070)
        rig.leaf_settings = {"spark_warm": "false"}
        rig.setup()
        snapshot = workdir / "snapshot"
        target, doc["backlog_events"] = build_backlog(rig, pair, args.backlog_s, snapshot)
        for round_no in range(args.rounds):
            for name, settings in args.variants:
                res = trial(rig, pair, snapshot, target, settings, args.sources.get(name))
                doc["trials"].append({"round": round_no, "variant": name, **res})
                print(name, res, flush=True)
    except (BenchError, PgferryError, psycopg.Error, subprocess.SubprocessError) as exc:
        print(f"FAILED: {one_line(exc)}", file=sys.stderr)
        return 1
    finally:
        rig.stop_all()
        if args.keep_log and rig.leaf_log.exists():
            shutil.copyfile(rig.leaf_log, args.keep_log)
        pair.destroy()
        shutil.rmtree(workdir, ignore_errors=True)
    doc["medians"] = {
        name: {
            key: statistics.median(t[key] for t in doc["trials"] if t["variant"] == name)
            for key in FIGURES
        }
        for name, _ in args.variants
    }
    for name, figures in doc["medians"].items():
        print(f"median {name}: {figures}")
    print("raw results:", write_results(doc, "catchup_trials", started, args.out))
    return 0 if all(t["equal"] for t in doc["trials"]) else 1


if __name__ == "__main__":
    sys.exit(main())
