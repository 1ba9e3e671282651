"""Compare benchmark: the four seed tables and a 1,000,000-row table, identical on both sides.

Per repetition: ``compare_tables`` (count + checksum per key bucket, both sides, Spark tasks),
and as the in-run anchor the counting query of the original compare run by hand on each side
one after the other (``select count(1), sum(hashtext(t::text)) from only T t``), i.e. the
original's work without its lock-and-wait.

    .venv/bin/python -m bench.compare_seed [--reps 3] [--big-rows 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import psycopg

from bench.copy_seed import (
    SCHEMA,
    SEED_TABLES,
    bench_spark,
    create_login_db,
    create_seed_db,
    machine,
    pgferry_copy,
    start_clusters,
)
from pgferry.sync.compare import CompareTask, compare_tables

ORIGINAL_SQL = "select count(1), sum(hashtext(t::text)) from only digoal_01.{} t"


def original_counting(connstrs: tuple[str, str], tables: tuple[str, ...]) -> float:
    started = time.monotonic()
    for table in tables:
        results = []
        for connstr in connstrs:
            with psycopg.connect(connstr) as conn:
                results.append(conn.execute(ORIGINAL_SQL.format(table)).fetchone())
        assert results[0] == results[1], (table, results)
    return time.monotonic() - started


def ours(spark, src: str, dst: str, tables: tuple[str, ...]) -> float:
    tasks = [CompareTask(f"digoal_01.{t}", f"digoal_01.{t}") for t in tables]
    started = time.monotonic()
    results = compare_tables(spark, src, dst, tasks)
    seconds = time.monotonic() - started
    assert all(r.matches for r in results), [r.lines() for r in results]
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--big-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    print(machine(), flush=True)
    src, dst = start_clusters("compare")
    try:
        spark = bench_spark()
        seed = (
            create_seed_db(src, "digoal_01", SCHEMA, fill=True),
            create_seed_db(dst, "digoal_01", SCHEMA, fill=False),
        )
        big = (
            create_login_db(src, "login_big", SCHEMA, args.big_rows),
            create_login_db(dst, "login_big", SCHEMA, 0),
        )
        pgferry_copy(spark, *seed, SEED_TABLES)
        pgferry_copy(spark, *big, ("user_login_rec",))
        ours(spark, *seed, SEED_TABLES)  # warm-up
        res: dict[str, list[float]] = {"ours4": [], "orig4": [], "ours1m": [], "orig1m": []}
        for rep in range(args.reps):
            res["ours4"].append(ours(spark, *seed, SEED_TABLES))
            res["orig4"].append(original_counting(seed, SEED_TABLES))
            res["ours1m"].append(ours(spark, *big, ("user_login_rec",)))
            res["orig1m"].append(original_counting(big, ("user_login_rec",)))
            print(f"rep {rep + 1}: " + ", ".join(f"{k}={v[-1]:.2f}s" for k, v in res.items()),
                  flush=True)  # fmt: skip
        print()
        print("| what | rows per side | median s | min | max |")
        print("|---|---:|---:|---:|---:|")
        for key, label, rows in (
            ("ours4", "pgferry compare_tables, 4 seed tables", 864_140),
            ("orig4", "original counting query alone, 4 tables, sides in turn", 864_140),
            ("ours1m", "pgferry compare_tables, user_login_rec", args.big_rows),
            ("orig1m", "original counting query alone, user_login_rec", args.big_rows),
        ):
            vals = res[key]
            print(f"| {label} | {rows:,} | {statistics.median(vals):.2f} | {min(vals):.2f} "
                  f"| {max(vals):.2f} |")  # fmt: skip
    finally:
        src.destroy()
        dst.destroy()


if __name__ == "__main__":
    sys.exit(main())
