"""Repair benchmark: 1,000 scattered differences in a 5,000,000-row table, found and fixed.

The destination gets an exact copy of user_login_rec (``copy_tables``), then 1,000 random rows
are broken: 400 updated, 300 deleted, 300 extra rows inserted.  Per repetition it measures

* targeted: ``compare_tables`` (locates the differing key buckets) + ``repair_tables`` over
  those ranges only, with apply; a final compare must match;
* full diff: ``repair_tables`` over the whole table (both sides read into Spark and joined),
  without apply, on the same damage — the anchor.

    .venv/bin/python -m bench.repair_scattered [--reps 3] [--rows 5000000] [--diffs 1000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from bench.copy_seed import (
    SCHEMA,
    bench_spark,
    create_login_db,
    machine,
    pgferry_copy,
    start_clusters,
)
from pgferry.sync.compare import CompareTask, compare_tables
from pgferry.sync.repair import repair_tables

TABLE = "digoal_01.user_login_rec"


def damage(dst: str, rows: int, diffs: int, seed: int) -> tuple[int, int, int]:
    """Break ``diffs`` random rows; returns the expected (inserts, updates, deletes) of a fix."""
    rng = random.Random(seed)
    ids = rng.sample(range(1, rows + 1), (diffs * 7) // 10)
    updates, deletes = ids[: (diffs * 4) // 10], ids[(diffs * 4) // 10 :]
    extra = diffs - len(ids)
    with psycopg.connect(dst) as conn:
        conn.execute(f"update {TABLE} set ip = '10.0.0.1' where id = any(%s)", (updates,))
        conn.execute(f"delete from {TABLE} where id = any(%s)", (deletes,))
        conn.execute(
            f"insert into {TABLE} (id, userid, login_time, ip)"
            f" select {rows} + g * 1000, g, now(), '10.9.9.9' from generate_series(1, %s) g",
            (extra,),
        )
    return len(deletes), len(updates), extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--diffs", type=int, default=1000)
    args = parser.parse_args()
    print(machine(), flush=True)
    src_cluster, dst_cluster = start_clusters("repair")
    fix_dir = Path(tempfile.mkdtemp(prefix="pgferry-bench-fix-"))
    task = CompareTask(TABLE, TABLE)
    try:
        spark = bench_spark()
        src = create_login_db(src_cluster, "login_5m", SCHEMA, args.rows)
        dst = create_login_db(dst_cluster, "login_5m", SCHEMA, 0)
        res: dict[str, list[float]] = {"compare": [], "targeted": [], "full": []}
        ranges_rows: list[int] = []
        for rep in range(args.reps):
            pgferry_copy(spark, src, dst, ("user_login_rec",))
            expected = damage(dst, args.rows, args.diffs, seed=rep)
            started = time.monotonic()
            (found,) = compare_tables(spark, src, dst, [task])
            compared = time.monotonic()
            (fixed,) = repair_tables(
                spark, src, dst, [task], fix_dir=fix_dir, apply=True,
                ranges={TABLE: found.ranges},
            )  # fmt: skip
            done = time.monotonic()
            assert (fixed.inserts, fixed.updates, fixed.deletes) == expected, fixed.line()
            assert compare_tables(spark, src, dst, [task])[0].matches
            res["compare"].append(compared - started)
            res["targeted"].append(done - started)
            ranges_rows.append(len(found.ranges))
            damage(dst, args.rows, args.diffs, seed=rep)
            started = time.monotonic()
            (full,) = repair_tables(spark, src, dst, [task], fix_dir=fix_dir, apply=False)
            res["full"].append(time.monotonic() - started)
            assert (full.inserts, full.updates, full.deletes) == expected, full.line()
            print(f"rep {rep + 1}: " + ", ".join(f"{k}={v[-1]:.2f}s" for k, v in res.items())
                  + f", differing ranges={ranges_rows[-1]}", flush=True)  # fmt: skip
        print()
        print("| what | median s | min | max |")
        print("|---|---:|---:|---:|")
        for key, label in (
            ("compare", f"compare_tables alone (finds the {args.diffs} differences' ranges)"),
            ("targeted", "compare + repair of the differing ranges, applied"),
            ("full", "full diff: repair_tables over all rows, not applied"),
        ):
            vals = res[key]
            print(f"| {label} | {statistics.median(vals):.2f} | {min(vals):.2f} "
                  f"| {max(vals):.2f} |")  # fmt: skip
        print(f"differing key ranges per run: {ranges_rows}")
    finally:
        src_cluster.destroy()
        dst_cluster.destroy()


if __name__ == "__main__":
    sys.exit(main())
