"""Lag of a replicated table while a large table is copied beside replay, pgferry and Londiste.

For each system, on its own throw-away root + leaf cluster pair (as in
``replication_vs_londiste.py``, whose set-up, seed load and lag sampler this reuses):

1. seed data, plus ``digoal_01.big_history`` filled with ROWS rows (default 5,000,000) on the
   root; replication set up and the four walkthrough tables attached on the leaf
   (``add-table``, unmeasured); ``big_history`` added on the root only;
2. **steady** — the seed load for BENCH_S seconds, the leaf consumer's lag sampled every
   second (the lag phase of the replication benchmark);
3. **raw pipe** — ``psql \\copy (select * from big_history) to stdout | psql \\copy ... from
   stdin`` into the emptied leaf table (PK kept), no load;
4. **copy beside replay** — the seed load started, lag sampled the same way, after
   PRE_S seconds ``add-table digoal_01.big_history`` on the leaf, timed until every table is
   ``ok``; the load stops then.  Lag figures of the samples taken between add-table and
   ``ok`` are compared with the steady ones.

Afterwards the leaf is caught up and the four tables plus ``big_history`` are compared
(count + checksum).  Goals: lag p95 during the copy under 2x the steady p95; the copy at
most 1.3x the raw pipe.

    .venv/bin/python -m bench.copy_beside_lag --pgferry-verbose     # full run (~8 min)
    .venv/bin/python -m bench.copy_beside_lag --rows 200000 --bench-s 10   # a quick look
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.common import machine, one_line, result_head, write_results
from bench.repl_env import (
    SCHEMA,
    TABLES,
    BenchError,
    Load,
    compare_sides,
    load_seed,
    make_pair,
    qualified,
    raw_pipe,
    rows_changed,
    settled_rows_changed,
)
from bench.repl_phases import (
    READY_TIMEOUT_S,
    Durations,
    LagSampler,
    checked,
    copy_tables,
    percentile,
    steady_lag,
    wait_ready,
)
from bench.repl_systems import RIGS, Rig, chosen_systems

BIG = "big_history"
BIG_SQL = f"""
create table {SCHEMA}.{BIG} (id bigint primary key, userid int, payload text,
  at timestamptz)
"""
GOAL_LAG_FACTOR = 2.0
GOAL_COPY_FACTOR = 1.3


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=5_000_000, help="rows of big_history")
    p.add_argument("--bench-s", type=int, default=30, help="seconds of the steady lag phase")
    p.add_argument("--pre-s", type=int, default=5, help="load seconds before the add-table")
    p.add_argument("--base-rows", type=int, default=200000)
    p.add_argument("--log-rows", type=int, default=232070)
    p.add_argument("--copy-timeout", type=int, default=1200)
    p.add_argument("--catchup-timeout", type=int, default=600)
    p.add_argument("--skip-londiste", action="store_true")
    p.add_argument("--skip-pgferry", action="store_true")
    p.add_argument("--pgferry-verbose", action="store_true", help="leaf worker with -v")
    p.add_argument("--keep", action="store_true", help="keep clusters and logs")
    p.add_argument("--out", type=Path, help="JSON result file (default bench/results/...)")
    return p.parse_args(argv)


def fill_big(pair, rows: int) -> dict:
    """``big_history`` on both sides, ``rows`` rows on the root (about 100 bytes a row)."""
    for side in ("root", "leaf"):
        pair.conn(side).execute(BIG_SQL)
    t0 = time.monotonic()
    conn = pair.conn("root")
    conn.execute(
        f"""
        insert into {SCHEMA}.{BIG} (id, userid, payload, at)
        select g, (g %% 200000) + 1, md5(g::text) || substr(md5((g * 7)::text), 1, 16),
               timestamptz '2026-01-01' + g * interval '1 second'
          from generate_series(1, %(n)s) g
        """,
        {"n": rows},
    )
    conn.execute(f"vacuum analyze {SCHEMA}.{BIG}")
    conn.execute("checkpoint")
    return {
        "rows": rows,
        "fill_s": round(time.monotonic() - t0, 1),
        "table_mb": round(
            pair.scalar("root", "select pg_table_size(%s::regclass)", (qualified(BIG),)) / 2**20
        ),
        "total_mb": round(
            pair.scalar("root", "select pg_total_relation_size(%s::regclass)", (qualified(BIG),))
            / 2**20
        ),
    }


def lag_figures(samples: list[float]) -> dict:
    if not samples:
        return {"samples": 0}
    return {
        "samples": len(samples),
        "lag_median_s": round(statistics.median(samples), 3),
        "lag_p95_s": round(percentile(samples, 95), 3),
        "lag_max_s": round(max(samples), 3),
    }


def big_equal(pair) -> dict:
    query = (
        f"select count(*), coalesce(sum(hashtext(t::text)::bigint), 0) from only {SCHEMA}.{BIG} t"
    )
    root = [int(v) for v in pair.conn("root").execute(query).fetchone()]
    leaf = [int(v) for v in pair.conn("leaf").execute(query).fetchone()]
    return {"equal": root == leaf, "root": root, "leaf": leaf}


def copy_beside(rig: Rig, d: Durations, outdir: Path, pre_s: int) -> dict:
    """add-table of big_history on the leaf while the seed load runs; lag sampled throughout."""
    rig.wait_caught_up(d.catchup_timeout_s)
    ready = wait_ready(rig, READY_TIMEOUT_S)
    log_at = rig.log_size()
    sampler = LagSampler(rig)
    sampler.start()
    changed0, load_t0 = rows_changed(rig.pair), time.monotonic()
    load = Load(rig.pair, d.copy_timeout_s + pre_s + 120, outdir, f"{rig.name}_beside").start()
    states_seen: list[tuple[float, list]] = []
    try:
        time.sleep(pre_s)
        wall0 = time.time()
        t0 = time.monotonic()
        rig.leaf("add-table", qualified(BIG))
        t_add = time.monotonic() - t0
        t_copied: float | None = None
        last: list = []
        while True:
            states = sorted(map(str, rig.leaf_states()))
            now = time.monotonic() - t0
            if states != last:
                states_seen.append((round(now, 2), states))
                last = states
            if t_copied is None and all(s not in ("None", "in-copy") for s in states):
                t_copied = now
            if len(states) == len(TABLES) + 1 and all(s == "ok" for s in states):
                break
            if now > d.copy_timeout_s:
                raise BenchError(f"copy not done after {d.copy_timeout_s} s, states: {states}")
            if not rig.leaf_running():
                raise BenchError(f"{rig.name} leaf worker died: {rig.log_tail(3)}")
            time.sleep(0.1)
        t_ok_abs = time.monotonic()
        t_ok = t_ok_abs - t0
        time.sleep(2.0)  # a couple of samples after the hand-over
    finally:
        load.stop()
        load_s = time.monotonic() - load_t0
        sampler.stop()
    during = [s for s, t in zip(sampler.samples, sampler.times, strict=True) if t0 <= t <= t_ok_abs]
    before = [s for s, t in zip(sampler.samples, sampler.times, strict=True) if t < t0]
    # pgbench stopped early prints no tps: two rows changed per transaction.
    events = settled_rows_changed(rig.pair) - changed0
    res = {
        **ready,
        "source_tps": round(events / 2 / load_s, 1),
        "load_events": events,
        "load_s": round(load_s, 1),
        "add_table_cmd_s": round(t_add, 3),
        "copy_done_s": round(t_copied if t_copied is not None else t_ok, 3),
        "all_ok_s": round(t_ok, 3),
        "during": lag_figures(during),
        "before_add": lag_figures(before),
        "raw_samples": [
            [round(t - t0, 2), s] for s, t in zip(sampler.samples, sampler.times, strict=True)
        ],
        "states_seen": states_seen,
        "sample_errors": sampler.errors[:5],
        "add_wall": dt.datetime.fromtimestamp(wall0).isoformat(timespec="milliseconds"),
        "leaf_log": rig.log_since(log_at, keep=150),
    }
    res["check"] = checked(rig, d)
    res["check_big"] = big_equal(rig.pair)
    return res


def run_system(name: str, args: argparse.Namespace, workroot: Path) -> dict:
    result: dict = {}
    workdir = workroot / name
    print(f"[{name}] clusters, seed data, {args.rows:,} rows of {BIG}", flush=True)
    pair = make_pair(name, workdir)
    rig: Rig | None = None
    d = Durations(0, args.bench_s, args.copy_timeout, args.catchup_timeout)
    outdir = workdir / "out"
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        result["seed_rows"] = load_seed(pair, args.base_rows, args.log_rows)
        result["big"] = fill_big(pair, args.rows)
        print(f"[{name}] {BIG}: {result['big']}", flush=True)
        rig = RIGS[name](pair, workdir, with_seqs=True, verbose=args.pgferry_verbose)
        rig.setup()
        rig.root("add-table", qualified(BIG))
        prep = copy_tables(rig, d, outdir, busy=False, add_seqs=True)
        result["prepare"] = {k: prep.get(k) for k in ("all_ok_s", "raw_pipe_s", "check")}
        print(f"[{name}] steady lag, {args.bench_s} s", flush=True)
        steady = steady_lag(rig, d, outdir)
        steady.pop("load", None)
        result["steady"] = steady
        print(
            f"[{name}] steady: median {steady['lag_median_s']} p95 {steady['lag_p95_s']}"
            f" max {steady['lag_max_s']} tps {steady['source_tps']}",
            flush=True,
        )
        rig.wait_caught_up(d.catchup_timeout_s)
        pipe = raw_pipe(pair, (BIG,))
        result["raw_pipe_s"] = pipe["seconds"]
        print(f"[{name}] raw pipe of {BIG}: {pipe['seconds']} s", flush=True)
        print(f"[{name}] add-table {BIG} on the leaf under the load", flush=True)
        res = copy_beside(rig, d, outdir, args.pre_s)
        result["copy"] = res
        during = res["during"]
        res["copy_to_raw"] = round(res["all_ok_s"] / pipe["seconds"], 2)
        if during.get("samples") and steady["lag_p95_s"]:
            res["p95_to_steady"] = round(during["lag_p95_s"] / steady["lag_p95_s"], 2)
        print(
            f"[{name}] copy: all ok {res['all_ok_s']} s (no table in-copy at"
            f" {res['copy_done_s']} s) = {res['copy_to_raw']}x raw pipe; lag during copy"
            f" {during}; p95 {res.get('p95_to_steady')}x steady;"
            f" equal {res['check'].get('equal')} / {res['check_big']['equal']}",
            flush=True,
        )
    except Exception as exc:  # record what failed, keep the other system going
        result["error"] = one_line(exc)
        result["traceback"] = traceback.format_exc().splitlines()[-6:]
        result["log_tail"] = rig.log_tail(30) if rig else []
        print(f"[{name}] FAILED: {result['error']}", flush=True)
        try:
            result["check"] = compare_sides(pair)
        except Exception as cexc:
            result["check"] = {"error": str(cexc).splitlines()[0]}
    finally:
        if rig is not None:
            rig.stop_all()
        pair.finish(args.keep, name, workdir)
    return result


def print_report(systems: dict) -> None:
    def fig(system: str, *path: str):
        value = systems.get(system, {})
        for key in path:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        return "-" if value in ({}, None) else value

    rows = [
        ("steady: source tps", ("steady", "source_tps")),
        ("steady: lag median (s)", ("steady", "lag_median_s")),
        ("steady: lag p95 (s)", ("steady", "lag_p95_s")),
        ("steady: lag max (s)", ("steady", "lag_max_s")),
        ("copy: source tps (whole phase)", ("copy", "source_tps")),
        ("copy: lag samples add-table -> ok", ("copy", "during", "samples")),
        ("copy: lag median (s)", ("copy", "during", "lag_median_s")),
        ("copy: lag p95 (s)", ("copy", "during", "lag_p95_s")),
        ("copy: lag max (s)", ("copy", "during", "lag_max_s")),
        (f"copy: p95 / steady p95 (goal < {GOAL_LAG_FACTOR:g})", ("copy", "p95_to_steady")),
        (f"raw psql pipe of {BIG} (s)", ("raw_pipe_s",)),
        ("copy: add-table -> no table in-copy (s)", ("copy", "copy_done_s")),
        ("copy: add-table -> all ok (s)", ("copy", "all_ok_s")),
        (f"copy: all ok / raw pipe (goal <= {GOAL_COPY_FACTOR:g})", ("copy", "copy_to_raw")),
        ("copy: 4 tables equal", ("copy", "check", "equal")),
        (f"copy: {BIG} equal", ("copy", "check_big", "equal")),
    ]
    print()
    print(f"{'figure':50} {'pgferry':>10} {'Londiste':>10}")
    for label, path in rows:
        print(f"{label:50} {fig('pgferry', *path)!s:>10} {fig('londiste', *path)!s:>10}")
    for system, res in systems.items():
        if res.get("error"):
            print(f"\n{system} FAILED: {res['error']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    systems = chosen_systems(args.skip_pgferry, args.skip_londiste)
    started = dt.datetime.now(dt.UTC)
    doc: dict = {
        **result_head("copy_beside_lag", started, argv),
        "loadavg_at_start": os.getloadavg(),
        "machine": machine(),
        "settings": {k: str(v) for k, v in vars(args).items()},
        "systems": {},
    }
    print(f"1-minute load average at start: {doc['loadavg_at_start'][0]:.2f}", flush=True)
    workroot = Path(tempfile.mkdtemp(prefix="pgferry-copybeside-"))
    os.chmod(workroot, 0o755)
    try:
        for system in systems:
            doc["systems"][system] = run_system(system, args, workroot)
            doc["systems"][system]["loadavg_after"] = os.getloadavg()
    finally:
        if not args.keep:
            shutil.rmtree(workroot, ignore_errors=True)
    out = write_results(doc, "copy_beside_lag", started, args.out)
    print_report(doc["systems"])
    print(f"\nraw results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
