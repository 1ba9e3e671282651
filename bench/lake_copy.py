"""Initial load of one table into Delta: pgferry's lake load beside Spark's JDBC read written
as Parquet and the floor, ``COPY ... TO`` a CSV file.

On a throw-away cluster, a table of ROWS rows (bigint key, text, numeric(12,2),
timestamptz) is

1. **COPY floor**: ``COPY (select * from t) TO STDOUT (format csv)`` streamed into a file;
2. **Spark JDBC**: ``spark.read.jdbc`` (partitioned on the key, one partition per core)
   written with ``df.write.parquet`` (needs the PostgreSQL JDBC driver: ``--jdbc-jar``,
   default the one in ``~/.m2``; skipped when absent);
3. **pgferry lake load**: :func:`pgferry.pipeline.lake_copy.copy_to_lake` into a new Delta
   table: Spark tasks write Parquet files of the snapshot's block ranges, the driver
   commits them once.

Spark (local, all cores) is started before the timings; the lake load is checked by
counting the Delta table's rows.  Goal: the lake load at most 1.5x the COPY floor.

    .venv/bin/python -m bench.lake_copy --rows 1000000
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
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
    parser.add_argument("--jdbc-jar", type=Path, default=DEFAULT_JAR)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    from pgferry.lake import delta
    from pgferry.lake import types as lake_types
    from pgferry.lake.spec import LakeSpec
    from pgferry.pipeline.copy import CopyTask
    from pgferry.pipeline.lake_copy import copy_to_lake
    from pgferry.pipeline.spark import get_spark

    work = Path(tempfile.mkdtemp(prefix="pgferry-lake-bench-"))
    cluster = make_cluster("lake-bench")
    doc: dict = {"rows": args.rows, "machine": machine(), "started": started.isoformat()}
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
        jars = str(args.jdbc_jar) if args.jdbc_jar.exists() else None
        settings = {"spark.ui.enabled": "false"}
        if jars:
            settings["spark.jars"] = jars
        spark = get_spark(master=f"local[{os.cpu_count()}]", app_name="lake-bench",
                          settings=settings)  # fmt: skip
        spark.range(1).count()  # started before anything is timed

        t0 = time.monotonic()
        with (
            connect(dsn) as conn,
            open(work / "t.csv", "wb") as out,
            conn.cursor().copy("copy (select * from t) to stdout (format csv)") as cp,
        ):
            for chunk in cp:
                out.write(chunk)
        doc["copy_csv_s"] = round(time.monotonic() - t0, 2)

        if jars:
            url = f"jdbc:postgresql://127.0.0.1:{cluster.port}/lakebench"
            t0 = time.monotonic()
            df = spark.read.jdbc(
                url, "t", column="id", lowerBound=1, upperBound=args.rows,
                numPartitions=os.cpu_count() or 2,
                properties={"user": "postgres", "driver": "org.postgresql.Driver"},
            )  # fmt: skip
            df.write.parquet(str(work / "jdbc"))
            doc["spark_jdbc_parquet_s"] = round(time.monotonic() - t0, 2)

        spec = LakeSpec("delta", str(work / "lake"), "public", "t", "bench:bench:public.t")
        with connect(dsn) as conn:
            columns = lake_types.table_columns(conn, "public.t")
        delta.prepare(spec, lake_types.arrow_schema(columns))
        t0 = time.monotonic()
        result = copy_to_lake(spark, dsn, dsn, [CopyTask("public.t", "public.t")], [spec])
        doc["pgferry_lake_s"] = round(time.monotonic() - t0, 2)
        from deltalake import DeltaTable

        counted = DeltaTable(spec.location).to_pyarrow_dataset().count_rows()
        if counted != args.rows or result.rows["public.t"] != args.rows:
            raise SystemExit(f"lake load has {counted} rows, not {args.rows}")
        doc["ratio_to_copy"] = round(doc["pgferry_lake_s"] / doc["copy_csv_s"], 2)
        spark.stop()
    finally:
        cluster.destroy()
        shutil.rmtree(work, ignore_errors=True)
    path = write_results(doc, "lake_copy", started, args.out)
    for key in ("rows", "copy_csv_s", "spark_jdbc_parquet_s", "pgferry_lake_s", "ratio_to_copy"):
        print(f"{key}: {doc.get(key, 'skipped')}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
