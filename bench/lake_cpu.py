"""CPU per row of the initial load into Delta and Iceberg, beside ``COPY`` to a file.

On a throw-away cluster, the seed-shaped table ``digoal_01.user_login_rec`` (int, timestamp,
inet, bigserial key; bench/copy_seed.py) of ROWS rows is, ``--reps`` times in turn:

1. **COPY floor**: ``COPY (select * from t) TO STDOUT (format csv)`` streamed into a file;
2. **Delta** and 3. **Iceberg**: :func:`pgferry.pipeline.lake_copy.copy_to_lake` into a
   new table of that format, by the driver's threads (no Spark: the load of a table of at
   most ``LOCAL_PAGES``; here for every size, so that every CPU-second is counted).

CPU is counted on both sides: this process's user + system time (every thread: COPY
reads, Arrow's CSV parse, Parquet writes, the commit) and the PostgreSQL cluster's (the
postmaster's own and its children's, read from /proc after the load's connections have
gone); the empty lake table is made before the load and its rows counted after it,
unmeasured.  Figures: rows per CPU-second (both sides, and the client side alone), wall
seconds; medians over the repetitions.

    .venv/bin/python -m bench.lake_cpu --rows 2000000 --reps 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import machine, write_results
from bench.copy_seed import SCHEMA, create_login_db
from pgferry.db import connect
from pgferry.testing.cluster import make_cluster

TABLE = "digoal_01.user_login_rec"
TICKS = os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _cluster_cpu(datadir: Path) -> float:
    """CPU seconds of the cluster: the postmaster, its live children, its reaped ones."""
    postmaster = int((datadir / "postmaster.pid").read_text().split()[0])
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, parent = int(entry), int(fields[1])
        if pid == postmaster:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        elif parent == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / TICKS


def _measured(datadir: Path, run) -> dict:
    own, server, t0 = _own_cpu(), _cluster_cpu(datadir), time.monotonic()
    run()
    wall = time.monotonic() - t0
    own, server = _own_cpu() - own, _cluster_cpu(datadir) - server
    return {"wall_s": round(wall, 2), "client_cpu_s": round(own, 2),
            "server_cpu_s": round(server, 2)}  # fmt: skip


def _floor(dsn: str, path: Path) -> None:
    with (
        connect(dsn) as conn,
        open(path, "wb") as out,
        conn.cursor().copy(f"copy (select * from {TABLE}) to stdout (format csv)") as cp,
    ):
        for chunk in cp:
            out.write(chunk)
    path.unlink()


def _lake_prepare(dsn: str, fmt: str, where: Path):
    from pgferry.lake import formats
    from pgferry.lake import types as lake_types
    from pgferry.lake.spec import LakeSpec

    spec = LakeSpec(fmt, str(where), "digoal_01", "user_login_rec", "bench:bench:t")
    where.mkdir(parents=True, exist_ok=True)
    with connect(dsn) as conn:
        columns = lake_types.table_columns(conn, TABLE)
    formats.module(fmt).prepare(spec, lake_types.arrow_schema(columns), ["id"])
    return spec


def _lake_load(dsn: str, spec) -> None:
    from pgferry.pipeline.copy import CopyTask
    from pgferry.pipeline.lake_copy import copy_to_lake

    copy_to_lake(None, dsn, dsn, [CopyTask(TABLE, TABLE)], [spec])


def _lake_count(spec) -> int:
    from pgferry.lake import formats

    return formats.module(spec.format).read(spec).num_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    from pgferry.pipeline import lake_copy

    lake_copy.LOCAL_PAGES = 1 << 40  # the driver's threads for every size: no Spark JVM
    work = Path(tempfile.mkdtemp(prefix="pgferry-lake-cpu-"))
    cluster = make_cluster("lake-cpu")
    doc: dict = {"rows": args.rows, "reps": args.reps, "machine": machine(),
                 "started": started.isoformat(), "loadavg_start": os.getloadavg()}  # fmt: skip
    runs: dict[str, list[dict]] = {"copy_csv": [], "delta": [], "iceberg": []}
    try:
        dsn = create_login_db(cluster, "digoal_01", SCHEMA, args.rows)
        with connect(dsn, autocommit=True) as conn:
            doc["table_bytes"] = conn.execute(f"select pg_table_size('{TABLE}')").fetchone()[0]
        for rep in range(args.reps):
            runs["copy_csv"].append(_measured(cluster.datadir, lambda: _floor(dsn, work / "t.csv")))
            for fmt in ("delta", "iceberg"):
                where = work / f"{fmt}{rep}"
                spec = _lake_prepare(dsn, fmt, where)  # the empty table: add-table's part
                runs[fmt].append(_measured(cluster.datadir, lambda s=spec: _lake_load(dsn, s)))
                if _lake_count(spec) != args.rows:
                    raise SystemExit(f"{fmt} load has {_lake_count(spec)} rows, not {args.rows}")
                shutil.rmtree(where, ignore_errors=True)
            print(f"rep {rep + 1}: " + ", ".join(f"{k} {v[-1]}" for k, v in runs.items()),
                  f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    finally:
        cluster.destroy()
        shutil.rmtree(work, ignore_errors=True)
    doc["runs"] = runs
    for name, measured in runs.items():
        both = [args.rows / (m["client_cpu_s"] + m["server_cpu_s"]) for m in measured]
        client = [args.rows / max(m["client_cpu_s"], 0.01) for m in measured]
        doc[name] = {
            "rows_per_cpu_s": round(statistics.median(both)),
            "rows_per_client_cpu_s": round(statistics.median(client)),
            "wall_median_s": statistics.median(m["wall_s"] for m in measured),
        }
        print(f"{name}: {doc[name]}")
    doc["loadavg_end"] = os.getloadavg()
    path = write_results(doc, "lake_cpu", started, args.out)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
