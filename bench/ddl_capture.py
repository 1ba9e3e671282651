"""What capture-ddl costs a root's DDL: 100 ``ALTER TABLE … ADD COLUMN`` timed with capture
off, with capture on (a replicated table: each statement isolated and queued), and with
capture on for a table nobody replicates (the event trigger's lookup alone).

One PostgreSQL 15 cluster, one root node; each phase on a fresh table of ``--rows`` rows
registered on the root (but the unreplicated one), the 100 statements sent one by one from
one autocommit connection; phases rotate over ``--reps`` repetitions.

    .venv/bin/python -m bench.ddl_capture [--reps 5] [--rows 10000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from bench.common import machine, write_results
from pgferry.testing.cascade import Cascade
from pgferry.testing.cluster import make_cluster

STATEMENTS = 100
PHASES = ("off", "on", "on, table not replicated")


def timed_alters(dsn: str, table: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        for n in range(STATEMENTS):
            conn.execute(f"alter table {table} add column c{n} int")  # type: ignore[arg-type]
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started = dt.datetime.now(dt.UTC)
    work = Path(tempfile.mkdtemp(prefix="pgferry-bench-ddl-"))
    cluster = make_cluster("bench-ddl")
    try:
        dsn = cluster.createdb("ddlbench")
        cascade = Cascade("ddlq", work)
        cascade.node("root", dsn, "root")
        times: dict[str, list[float]] = {p: [] for p in PHASES}
        for rep in range(args.reps):
            for phase in PHASES:
                table = f"public.t_{rep}_{PHASES.index(phase)}"
                cascade.sql(
                    "root",
                    f"create table {table} (id int primary key, v text);"
                    f" insert into {table} select g, 'v' || g"
                    f" from generate_series(1, {args.rows}) g",
                )
                if phase != "on, table not replicated":
                    cascade.add("root", table)
                switch = "off" if phase == "off" else "on"
                result = cascade.cli("root", "capture-ddl", switch)
                assert result.code == 0, result.err
                cascade.sql("root", "checkpoint")
                times[phase].append(timed_alters(dsn, table))
        queued = cascade.sql(
            "root", "select count(*) from ferry_queue.event where ev_type = 'EXECUTE'"
        )[0][0]
        cascade.close()
    finally:
        cluster.destroy()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    doc = {
        "benchmark": "ddl_capture",
        "started": started.isoformat(timespec="seconds"),
        "commit": commit,
        "machine": machine(),
        "statements": STATEMENTS,
        "rows": args.rows,
        "reps": args.reps,
        "queued_events": queued,
        "seconds": times,
        "median_seconds": {p: statistics.median(t) for p, t in times.items()},
    }
    path = write_results(doc, "ddl_capture", started, args.out)
    for phase in PHASES:
        median = statistics.median(times[phase])
        spread = f"{min(times[phase]):.3f}–{max(times[phase]):.3f}"
        print(
            f"{phase:>26}: {median:.3f} s per {STATEMENTS} statements "
            f"({median / STATEMENTS * 1000:.2f} ms each; {spread} s)"
        )
    print(f"queued EXECUTE events: {queued} (expected {STATEMENTS * args.reps})")
    print(f"written {path}")


if __name__ == "__main__":
    main()
