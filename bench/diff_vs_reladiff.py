"""``pgferry diff`` against ``reladiff`` on the same two tables, each run as a user runs it.

Two table pairs in two databases of one local cluster: a small one (1,000 rows, a few
differences) and a large one (5,000,000 rows, 1,000 differences: a third changed, a third
missing from the destination, a third only in it), generated server-side with
``generate_series``.  The cluster stays in ``--cache-dir`` between runs (stopped at the end,
started again by the next run), so the large tables are built once.

Per pair and repetition, each a whole command in a subprocess: ``pgferry diff`` (the differing
keys, marked as reladiff marks them, with the rows of the first ten), ``pgferry diff --repair
FILE`` (the same, and the fix SQL written, not applied) and ``reladiff`` (the exact rows,
comparing every column).  Medians are printed and written as JSON under bench/results/.  Every
run is checked: both tools find exactly the planted differences.

With ``--connect`` a Spark Connect server (local mode, started once before the runs and not
timed: a Spark that is already running) serves a third pair of commands, the same two with
``--set spark_remote=sc://...``: no JVM starts in the command.

reladiff lives in its own virtualenv so that it cannot change pgferry's dependencies:
    python3 -m venv .bench-venv && .bench-venv/bin/pip install reladiff psycopg2-binary
    PYTHONPATH=src .venv/bin/python -m bench.diff_vs_reladiff [--reps 5] [--big-reps 3] [--connect]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from bench.copy_seed import machine
from pgferry.testing.cluster import LocalCluster, make_cluster

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("name", "amount", "n")


def open_cluster(cache: Path, fresh: bool) -> LocalCluster:
    """The cached cluster when there is one, else a new one in ``cache``."""
    data = cache / "data"
    if data.exists() and not fresh:
        conf = (data / "postgresql.auto.conf").read_text()
        port = int(re.findall(r"^port = (\d+)", conf, re.M)[-1])
        cluster = LocalCluster(base_dir=cache, port=port)
        if not cluster.is_running():
            cluster.start()
        return cluster
    if cache.exists():
        LocalCluster(base_dir=cache).destroy()
    cluster = make_cluster("diffbench", parent=Path(tempfile.gettempdir()))
    cluster.stop()
    cluster.base_dir.rename(cache)
    cluster.base_dir = cache
    return cluster.start()


def planted(rows: int, count: int) -> dict[str, set[int]]:
    """The differences the tables are built with: key -> update / delete / extra."""
    step = rows // count
    out: dict[str, set[int]] = {"update": set(), "delete": set(), "extra": set()}
    for k in range(count):
        out[("update", "delete", "extra")[k % 3]].add(k * step + step // 2)
    return out


def build(cluster: LocalCluster, table: str, rows: int, count: int) -> None:
    """Create ``table`` in databases src and dst unless it is there with these sizes."""
    for db in ("src", "dst"):
        with psycopg.connect(cluster.connstr(), autocommit=True) as conn:
            if not conn.execute("select 1 from pg_database where datname = %s", (db,)).fetchone():
                conn.execute(f"create database {db}")
    tag = f"{rows} rows, {count} differences"
    with psycopg.connect(cluster.connstr("dst")) as conn:
        have = conn.execute(
            "select obj_description(to_regclass(%s), 'pg_class')", (table,)
        ).fetchone()
    if have and have[0] == tag:
        return
    print(f"building {table}: {tag}", flush=True)
    step = rows // count

    # k = g / step picks the kind of a planted key g (g % step = step / 2): 0 update, 1 delete,
    # 2 extra (only in dst), as planted() says.
    def kind(n: int) -> str:
        return f"(g % {step} = {step // 2} and (g / {step}) % 3 = {n})"

    value = "g, md5(g::text), (g % 100000) * 1.25, g % 1000"
    src_sql = f"select {value} from generate_series(1, {rows}) g where not {kind(2)}"
    dst_sql = (
        f"select g, case when {kind(0)} then 'changed' else md5(g::text) end,"
        f" (g % 100000) * 1.25, g % 1000 from generate_series(1, {rows}) g where not {kind(1)}"
    )
    for db, fill in (("src", src_sql), ("dst", dst_sql)):
        with psycopg.connect(cluster.connstr(db), autocommit=True) as conn:
            conn.execute(f"drop table if exists {table}")
            conn.execute(
                f"create table {table} (id bigint primary key, name text,"
                " amount numeric(12,2), n int)"
            )
            conn.execute(f"insert into {table} {fill}")
            conn.execute(f"vacuum analyze {table}")
            conn.execute(f"comment on table {table} is '{tag}'")


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    return time.monotonic() - started, proc


def uri(cluster: LocalCluster, db: str) -> str:
    return f"postgresql://postgres@127.0.0.1:{cluster.port}/{db}"


def run_pgferry(
    cluster: LocalCluster, table: str, fix: Path | None, remote: str | None = None
) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "pgferry", "diff"]
    cmd += [cluster.connstr("src"), table, cluster.connstr("dst"), table]
    if fix is not None:
        cmd += ["--repair", str(fix)]
    if remote is not None:
        cmd += ["--set", f"spark_remote={remote}"]
    seconds, proc = timed(cmd, env)
    if proc.returncode != 1:  # 1: the tables differ
        raise SystemExit(f"pgferry diff: exit {proc.returncode}\n{proc.stderr}")
    return seconds, proc.stdout


def run_reladiff(cluster: LocalCluster, table: str, reladiff: Path) -> tuple[float, str]:
    cmd = [str(reladiff), uri(cluster, "src"), table, uri(cluster, "dst"), table, "-k", "id"]
    for column in COLUMNS:
        cmd += ["-c", column]
    seconds, proc = timed(cmd, dict(os.environ))
    if proc.returncode != 0:
        raise SystemExit(f"reladiff: exit {proc.returncode}\n{proc.stderr}")
    return seconds, proc.stdout


def reladiff_keys(out: str) -> dict[str, set[int]]:
    """Lines ``- (id, ...)`` (only in the first table) and ``+ (...)`` (only in the second)."""
    minus = {int(m) for m in re.findall(r"^- \(?'?(\d+)", out, re.M)}
    plus = {int(m) for m in re.findall(r"^\+ \(?'?(\d+)", out, re.M)}
    return {"update": minus & plus, "delete": minus - plus, "extra": plus - minus}


def fix_keys(path: Path) -> dict[str, set[int]]:
    text = path.read_text()
    found = {
        kind: {int(k) for k in re.findall(pattern, text, re.M)}
        for kind, pattern in (
            ("update", r"^update .* where \"?id\"? = '?(\d+)"),
            ("delete", r"^delete from .* where \"?id\"? = '?(\d+)"),
            ("extra", r"^insert into .* values \('?(\d+)"),
        )
    }
    # In the fix, a row only in dst is deleted and one missing from dst is inserted.
    return {"update": found["update"], "delete": found["extra"], "extra": found["delete"]}


def diff_keys(out: str) -> dict[str, set[int]]:
    """The keys ``pgferry diff`` prints: ``! id=N`` changed, ``- id=N`` only in the source
    (missing from the destination), ``+ id=N`` only in the destination."""
    return {
        kind: {int(k) for k in re.findall(rf"^{re.escape(mark)} id=(\d+)$", out, re.M)}
        for kind, mark in (("update", "!"), ("delete", "-"), ("extra", "+"))
    }


def bench_pair(cluster, table, rows, count, reps, reladiff, workdir, remote=None) -> dict:
    expected = planted(rows, count)
    for db in ("src", "dst"):  # the cluster was just started: read the tables in once
        with psycopg.connect(cluster.connstr(db)) as conn:
            conn.execute(f"select count(*), sum(hashtext(name)) from {table}").fetchone()
    times: dict[str, list[float]] = {"pgferry_diff": [], "pgferry_repair": [], "reladiff": []}
    ways = [("", None)]
    if remote:
        times.update(pgferry_diff_connect=[], pgferry_repair_connect=[])
        ways.append(("_connect", remote))
    for _ in range(reps):
        for suffix, url in ways:
            seconds, out = run_pgferry(cluster, table, None, url)
            assert diff_keys(out) == expected, "pgferry diff found other differences"
            times[f"pgferry_diff{suffix}"].append(seconds)
            fix = workdir / f"{table}.sql"
            seconds, _ = run_pgferry(cluster, table, fix, url)
            assert fix_keys(fix) == expected, "pgferry repair found other differences"
            times[f"pgferry_repair{suffix}"].append(seconds)
        seconds, out = run_reladiff(cluster, table, reladiff)
        assert reladiff_keys(out) == expected, "reladiff found other differences"
        times["reladiff"].append(seconds)
        print(f"  {table}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()), flush=True)
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {
        "rows": rows,
        "differences": count,
        "reps": reps,
        "runs": times,
        "median": medians,
        **{f"ratio_{k[len('pgferry_'):]}": medians[k] / medians["reladiff"] for k in medians
           if k.startswith("pgferry_")},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="runs of the small pair")
    parser.add_argument("--big-reps", type=int, default=3, help="runs of the large pair")
    parser.add_argument("--big-rows", type=int, default=5_000_000, help="0: skip the large pair")
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/pgferry-diffbench"))
    parser.add_argument("--fresh", action="store_true", help="rebuild the cached cluster")
    parser.add_argument("--reladiff", type=Path, default=ROOT / ".bench-venv/bin/reladiff")
    parser.add_argument("--connect", action="store_true", help="also on a Spark Connect server")
    args = parser.parse_args()
    print(machine(), flush=True)
    cluster = open_cluster(args.cache_dir, args.fresh)
    result: dict = {
        "machine": machine(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_before": os.getloadavg(),
        "commit": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "reladiff": subprocess.run(
            [str(args.reladiff), "--version"], capture_output=True, text=True
        ).stdout.strip(),
        "pairs": {},
    }
    pairs = [("t_small", 1000, 5, args.reps)]
    if args.big_rows:
        pairs.append(("t_big", args.big_rows, 1000, args.big_reps))
    server = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.connect:
                from pgferry.testing.spark_connect import start_connect_server

                started = time.monotonic()
                server = start_connect_server(Path(tmp))
                result["connect_server_start_s"] = time.monotonic() - started
                print(f"Spark Connect server {server.url} up in"
                      f" {result['connect_server_start_s']:.1f} s", flush=True)  # fmt: skip
            for table, rows, count, reps in pairs:
                build(cluster, table, rows, count)
                result["pairs"][table] = bench_pair(
                    cluster, table, rows, count, reps, args.reladiff, Path(tmp),
                    server.url if server else None,
                )  # fmt: skip
    finally:
        if server is not None:
            server.stop()
        cluster.stop()
    result["load_after"] = os.getloadavg()
    print(f"\n{'pair':<8} {'rows':>9} {'pgferry diff':>13} {'--repair':>9} {'reladiff':>9}")
    for table, r in result["pairs"].items():
        m = r["median"]
        print(
            f"{table:<8} {r['rows']:>9} {m['pgferry_diff']:>12.2f}s {m['pgferry_repair']:>8.2f}s"
            f" {m['reladiff']:>8.2f}s   diff/reladiff {r['ratio_diff']:.2f},"
            f" repair/reladiff {r['ratio_repair']:.2f}"
        )
        if "pgferry_diff_connect" in m:
            print(
                f"{'':<8} {'connect':>9} {m['pgferry_diff_connect']:>12.2f}s"
                f" {m['pgferry_repair_connect']:>8.2f}s {'':>9}   diff/reladiff"
                f" {r['ratio_diff_connect']:.2f}, repair/reladiff {r['ratio_repair_connect']:.2f}"
            )
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"diff_vs_reladiff-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2, default=sorted))
    print(f"written: {path}")


if __name__ == "__main__":
    main()
