"""Where a local Spark pays off for compare and repair: the command's threads against a
local-mode Spark job, on the tables of ``bench/diff_vs_reladiff.py`` (its cached cluster).

For each size (rows of ``t_big`` taken by a key condition on both sides) it times, in this
process, the same library calls on both paths:

* compare's bucket sums: on the driver (``threads`` = the cores, what the default
  configuration runs) and as a Spark job in local mode (``threads=0``);
* repair's read of the whole table (both sides, joined): on the driver
  (``LOCAL_MODE_ROWS`` lifted) and as a Spark job (``LOCAL_ROWS`` = -1);

the Spark session started once, before the first Spark timing, and its start and first
job timed on their own: a command in a new process pays them on top of the job.

    PYTHONPATH=src .venv/bin/python -m bench.diff_crossover [--sizes 1000000,5000000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from bench.copy_seed import machine
from bench.diff_vs_reladiff import build, open_cluster
from pgferry.sync import compare, repair_local
from pgferry.sync.compare import CompareTask, compare_tables, driver_threads
from pgferry.sync.repair import find_differences

ROOT = Path(__file__).resolve().parent.parent


def timed(fn) -> float:
    started = time.monotonic()
    fn()
    return time.monotonic() - started


def _run(args, src: str, dst: str, threads: int, result: dict) -> None:
    spark = None
    for size in map(int, args.sizes.split(",")):
        cond = f"id <= {size}"
        task = CompareTask("t_big", "t_big", cond, cond)
        times: dict[str, list[float]] = {
            k: [] for k in ("compare_driver", "compare_spark", "repair_driver", "repair_spark")
        }
        for _ in range(args.reps):
            times["compare_driver"].append(
                timed(lambda t=task: compare_tables(None, src, dst, [t], threads=threads))
            )
            if spark is None:
                from pgferry.pipeline.spark import get_spark

                started = time.monotonic()
                spark = get_spark(master="local[*]", app_name="diff-crossover")
                result["spark_start_s"] = time.monotonic() - started
                result["spark_first_job_s"] = timed(
                    lambda t=task, s=spark: compare_tables(s, src, dst, [t], threads=0)
                )
            times["compare_spark"].append(
                timed(lambda t=task, s=spark: compare_tables(s, src, dst, [t], threads=0))
            )
            times["repair_driver"].append(
                timed(lambda t=task: find_differences(None, src, dst, [t], threads=threads))
            )
            times["repair_spark"].append(
                timed(lambda t=task, s=spark: find_differences(s, src, dst, [t], threads=0))
            )
            line = ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items())
            print(f"{size}: {line}", flush=True)
        result["sizes"][size] = {
            "runs": times,
            "median": {k: statistics.median(v) for k, v in times.items()},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,5000000")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/pgferry-diffbench"))
    args = parser.parse_args()
    cluster = open_cluster(args.cache_dir, False)
    build(cluster, "t_big", 5_000_000, 1000)
    src, dst = cluster.connstr("src"), cluster.connstr("dst")
    threads = driver_threads({})
    # The size alone picks no path here: threads do (driver) or their absence (Spark).
    compare.LOCAL_PAGES = -1
    repair_local.LOCAL_ROWS = -1
    repair_local.LOCAL_MODE_ROWS = 10**12
    result: dict = {"machine": machine(), "load_before": os.getloadavg(), "sizes": {}}
    try:
        _run(args, src, dst, threads, result)
    finally:
        cluster.stop()
    result["load_after"] = os.getloadavg()
    print(json.dumps({k: v for k, v in result.items() if k != "sizes"}, indent=1))
    for size, r in result["sizes"].items():
        print(size, {k: round(v, 2) for k, v in r["median"].items()})
    out = ROOT / "bench" / "results" / f"diff_crossover-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
