"""Initial load of one table into Delta: pgferry's lake load beside the floor, ``COPY ...
TO`` a CSV file, and Spark's JDBC read written as Parquet.

On a throw-away cluster, a table of ROWS rows (bigint key, text, numeric(12,2),
timestamptz) is

1. **COPY floor**: ``COPY (select * from t) TO STDOUT (format csv)`` streamed into a file;
2. **pgferry lake load**: :func:`pgferry.pipeline.lake_copy.copy_to_lake` into a new Delta
   table: Spark tasks write Parquet files of the snapshot's block ranges, the driver
   commits them once;
3. **Spark JDBC** (once, unless ``--no-jdbc``): ``spark.read.jdbc`` (partitioned on the
   key, one partition per core) written with ``df.write.parquet`` (needs the PostgreSQL
   JDBC driver: ``--jdbc-jar``, default the one in ``~/.m2``; skipped when absent).

The floor and the lake load run alternately ``--reps`` times (a shared machine's load
changes from one minute to the next): the figures are the medians and the ratio is that
of the medians, with each repetition's own ratio beside it.  Spark (local, all cores) and
its Python worker daemon are started before anything is timed: the first Python job's
start is timed on its own (``python_daemon_start_s``), as are the phases of one more,
untimed load (``profile``: job, commit).  Each lake load is checked by counting the Delta
table's rows.  Goal: the lake load at most 1.5x the COPY floor.

    .venv/bin/python -m bench.lake_copy --rows 5000000 --reps 5
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
from pathlib import Path

from bench.common import machine, write_results
from pgferry.db import connect
from pgferry.testing.cluster import make_cluster

DEFAULT_JAR = (
    Path.home() / ".m2/repository/org/postgresql/postgresql/42.7.13/postgresql-42.7.13.jar"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--jdbc-jar", type=Path, default=DEFAULT_JAR)
    parser.add_argument("--no-jdbc", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    from pgferry.pipeline.spark import get_spark

    work = Path(tempfile.mkdtemp(prefix="pgferry-lake-bench-"))
    cluster = make_cluster("lake-bench")
    doc: dict = {"rows": args.rows, "reps": args.reps, "machine": machine(),
                 "started": started.isoformat(), "loadavg_start": os.getloadavg()}  # fmt: skip
    try:
        dsn = cluster.createdb("lakebench")
        with connect(dsn, autocommit=True) as conn:
            conn.execute(
                "create table t (id bigint primary key, v text, n numeric(12,2), ts timestamptz)"
            )
            conn.execute(
                "insert into t select g, md5(g::text), g / 100.0, now() - g * interval '1 s'"
                " from generate_series(1, %s) g",
                (args.rows,),
            )
            conn.execute("vacuum analyze t")
            size = conn.execute("select pg_table_size('t')").fetchone()[0]
        doc["table_bytes"] = size
        jars = None if args.no_jdbc or not args.jdbc_jar.exists() else str(args.jdbc_jar)
        settings = {"spark.ui.enabled": "false"}
        if jars:
            settings["spark.jars"] = jars
        spark = get_spark(master=f"local[{os.cpu_count()}]", app_name="lake-bench",
                          settings=settings)  # fmt: skip
        spark.range(1).count()  # the JVM started before anything is timed
        t0 = time.monotonic()
        spark.sparkContext.parallelize([0], 1).map(lambda x: x).collect()
        doc["python_daemon_start_s"] = round(time.monotonic() - t0, 2)
        doc["profile"] = _profile(spark, dsn, work)

        floors, loads = [], []
        for rep in range(args.reps):
            floors.append(_floor(dsn, work / "t.csv"))
            loads.append(_lake_load(spark, dsn, work / f"lake{rep}", args.rows))
            print(f"rep {rep + 1}: floor {floors[-1]} s, lake {loads[-1]} s,"
                  f" {loads[-1] / floors[-1]:.2f}x, load {os.getloadavg()[0]:.1f}",
                  flush=True)  # fmt: skip
        doc["copy_csv_s"] = floors
        doc["pgferry_lake_s"] = loads
        doc["copy_csv_median_s"] = statistics.median(floors)
        doc["pgferry_lake_median_s"] = statistics.median(loads)
        doc["ratio_to_copy"] = round(doc["pgferry_lake_median_s"] / doc["copy_csv_median_s"], 2)
        doc["ratios"] = [round(b / a, 2) for a, b in zip(floors, loads, strict=True)]
        if jars:
            doc["spark_jdbc_parquet_s"] = _jdbc(spark, cluster.port, args.rows, work / "jdbc")
        doc["loadavg_end"] = os.getloadavg()
        spark.stop()
    finally:
        cluster.destroy()
        shutil.rmtree(work, ignore_errors=True)
    path = write_results(doc, "lake_copy", started, args.out)
    for key in ("rows", "python_daemon_start_s", "profile", "copy_csv_s", "pgferry_lake_s",
                "copy_csv_median_s", "pgferry_lake_median_s", "ratio_to_copy", "ratios",
                "spark_jdbc_parquet_s", "loadavg_start", "loadavg_end"):  # fmt: skip
        print(f"{key}: {doc.get(key, 'skipped')}")
    print(f"results: {path}")
    return 0


def _floor(dsn: str, path: Path) -> float:
    t0 = time.monotonic()
    with (
        connect(dsn) as conn,
        open(path, "wb") as out,
        conn.cursor().copy("copy (select * from t) to stdout (format csv)") as cp,
    ):
        for chunk in cp:
            out.write(chunk)
    seconds = round(time.monotonic() - t0, 2)
    path.unlink()
    return seconds


def _lake_load(spark, dsn: str, where: Path, rows: int) -> float:
    from deltalake import DeltaTable

    from pgferry.pipeline.copy import CopyTask
    from pgferry.pipeline.lake_copy import copy_to_lake

    spec = _prepare(dsn, where)
    t0 = time.monotonic()
    result = copy_to_lake(spark, dsn, dsn, [CopyTask("public.t", "public.t")], [spec])
    seconds = round(time.monotonic() - t0, 2)
    counted = DeltaTable(spec.location).to_pyarrow_dataset().count_rows()
    if counted != rows or result.rows["public.t"] != rows:
        raise SystemExit(f"lake load has {counted} rows, not {rows}")
    shutil.rmtree(where)
    return seconds


def _prepare(dsn: str, where: Path):
    from pgferry.lake import delta
    from pgferry.lake import types as lake_types
    from pgferry.lake.spec import LakeSpec

    spec = LakeSpec("delta", str(where), "public", "t", "bench:bench:public.t")
    with connect(dsn) as conn:
        columns = lake_types.table_columns(conn, "public.t")
    delta.prepare(spec, lake_types.arrow_schema(columns), ["id"])
    return spec


def _profile(spark, dsn: str, work: Path) -> dict:
    """One load's phases: the Spark job (tasks' reads, parses and writes) and the rest
    (snapshot, planning, the commit)."""
    from pgferry.pipeline import lake_copy
    from pgferry.pipeline.copy import CopyTask

    spec = _prepare(dsn, work / "profile")
    job = {}
    run_groups = lake_copy.run_groups

    def timed(*args, **kwargs):
        t0 = time.monotonic()
        try:
            return run_groups(*args, **kwargs)
        finally:
            job["spark_job_s"] = round(time.monotonic() - t0, 2)

    lake_copy.run_groups = timed
    try:
        t0 = time.monotonic()
        lake_copy.copy_to_lake(spark, dsn, dsn, [CopyTask("public.t", "public.t")], [spec])
        job["total_s"] = round(time.monotonic() - t0, 2)
    finally:
        lake_copy.run_groups = run_groups
        shutil.rmtree(work / "profile", ignore_errors=True)
    job["rest_s"] = round(job["total_s"] - job.get("spark_job_s", 0), 2)
    return job


def _jdbc(spark, port: int, rows: int, out: Path) -> float:
    url = f"jdbc:postgresql://127.0.0.1:{port}/lakebench"
    t0 = time.monotonic()
    df = spark.read.jdbc(
        url, "t", column="id", lowerBound=1, upperBound=rows,
        numPartitions=os.cpu_count() or 2,
        properties={"user": "postgres", "driver": "org.postgresql.Driver"},
    )  # fmt: skip
    df.write.parquet(str(out))
    return round(time.monotonic() - t0, 2)


if __name__ == "__main__":
    sys.exit(main())
