"""Copy benchmark: the four seed tables and a 5,000,000-row user_login_rec, vs a raw psql pipe.

Starts two throw-away clusters, loads the walkthrough schema
(/work/shared/anchors/londiste/sql/schema.sql, or ``--schema``), and per repetition measures:

* the raw pipe ``psql -c "\\copy T to stdout" | psql -c "\\copy T from stdin"``, tables one after
  another into the truncated destination with its primary key kept (the anchor);
* ``copy_tables`` (the pgferry copy job: one snapshot, block ranges, COPY streams in Spark
  tasks, index rebuild and ANALYZE included), Spark already started;
* once, two other data paths through Spark: Spark's JDBC source/sink (system driver), and
  reading into Arrow batches with ``mapInArrow`` (the repair read path, read only).

    .venv/bin/python -m bench.copy_seed [--reps 3] [--login-rows 5000000]

The other benchmarks import the seed helpers from here.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from pgferry.testing.cluster import LocalCluster, make_cluster

SCHEMA = Path("/work/shared/anchors/londiste/sql/schema.sql")
SEED_TABLES = ("user_info", "user_session", "user_login_rec", "user_logout_rec")
# The row counts of the earlier Londiste run (RESULTS.md, b): 864,140 rows in all.
LOGIN_ROWS, LOGOUT_ROWS = 222_021, 242_119

FILL_INFO = """
insert into digoal_01.user_info (userid,engname,cnname,occupation,birthday,signname,email,qq,
                                 crt_time,mod_time)
  select g, 'digoal.zhou', '德哥', 'DBA', '1970-01-01',
         '公益是一辈子的事, I''m Digoal.Zhou, Just do it!', 'digoal@126.com', 276732431,
         clock_timestamp(), null
  from generate_series(1,200000) g;
insert into digoal_01.user_session (userid) select g from generate_series(1,200000) g;
"""
FILL_REC = """
insert into digoal_01.{table} (userid, {col}, ip)
  select (random()*199999)::int + 1, clock_timestamp(), inet '127.0.0.1'
  from generate_series(1, {rows});
"""


def start_clusters(tag: str) -> tuple[LocalCluster, LocalCluster]:
    parent = Path(tempfile.mkdtemp(prefix=f"pgferry-bench-{tag}-"))
    os.chmod(parent, 0o755)
    return make_cluster("src", parent), make_cluster("dst", parent)


def create_seed_db(cluster: LocalCluster, dbname: str, schema: Path, fill: bool) -> str:
    connstr = cluster.createdb(dbname)
    with psycopg.connect(connstr, autocommit=True) as conn:
        conn.execute(schema.read_text())
        if fill:
            conn.execute(FILL_INFO)
            conn.execute(FILL_REC.format(table="user_login_rec", col="login_time", rows=LOGIN_ROWS))
            conn.execute(
                FILL_REC.format(table="user_logout_rec", col="logout_time", rows=LOGOUT_ROWS)
            )
            conn.execute("vacuum analyze")
    return connstr


def create_login_db(cluster: LocalCluster, dbname: str, schema: Path, rows: int) -> str:
    """Only user_login_rec, with ``rows`` rows (0: empty)."""
    connstr = create_seed_db(cluster, dbname, schema, fill=False)
    if rows:
        with psycopg.connect(connstr, autocommit=True) as conn:
            conn.execute(FILL_REC.format(table="user_login_rec", col="login_time", rows=rows))
            conn.execute("vacuum analyze digoal_01.user_login_rec")
    return connstr


def psql_cmd(cluster: LocalCluster, dbname: str, command: str) -> list[str]:
    local = cluster.bindir / "psql"
    psql = str(local) if local.exists() else shutil.which("psql") or "psql"
    return [
        psql, "-X", "-q", "-h", "127.0.0.1", "-p", str(cluster.port),
        "-U", "postgres", "-d", dbname, "-c", command,
    ]  # fmt: skip


def truncate(connstr: str, tables: tuple[str, ...]) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"truncate digoal_01.{table}")
        conn.execute("checkpoint")


def raw_pipe(src: LocalCluster, src_db: str, dst: LocalCluster, dst_db: str,
             tables: tuple[str, ...]) -> float:  # fmt: skip
    """Seconds for the psql pipe, tables one after another."""
    started = time.monotonic()
    for table in tables:
        out = subprocess.Popen(
            psql_cmd(src, src_db, f"\\copy digoal_01.{table} to stdout"), stdout=subprocess.PIPE
        )
        subprocess.run(
            psql_cmd(dst, dst_db, f"\\copy digoal_01.{table} from stdin"),
            stdin=out.stdout, check=True,
        )  # fmt: skip
        out.stdout.close()  # type: ignore[union-attr]
        if out.wait() != 0:
            raise SystemExit(f"psql \\copy out of {table} failed")
    return time.monotonic() - started


def pgferry_copy(spark, src: str, dst: str, tables: tuple[str, ...]) -> tuple[float, int]:
    from pgferry.pipeline.copy import CopyTask, copy_tables

    tasks = [CopyTask(f"digoal_01.{t}", f"digoal_01.{t}") for t in tables]
    started = time.monotonic()
    result = copy_tables(spark, src, dst, tasks, progress=False)
    return time.monotonic() - started, sum(result.rows.values())


def count_rows(connstr: str, tables: tuple[str, ...]) -> int:
    with psycopg.connect(connstr) as conn:
        return sum(
            conn.execute(f"select count(*) from digoal_01.{t}").fetchone()[0]  # type: ignore[index]
            for t in tables
        )


def bench_spark(master: str = "local[*]"):
    from pgferry.pipeline.spark import get_spark

    spark = get_spark(
        master=master, app_name="pgferry-bench", settings={"spark.driver.memory": "4g"}
    )
    spark.sparkContext.parallelize(range(4), 2).count()  # start the Python workers once
    return spark


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = os.getloadavg()[0]
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}), {mem:.0f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}, "
        f"load average at start {load:.1f}"
    )


def jdbc_copy(spark, src: LocalCluster, dst: LocalCluster, src_db: str, dst_db: str,
              tables: tuple[str, ...]) -> float:  # fmt: skip
    """Spark JDBC read -> JDBC write (batched inserts), tables one after another."""
    started = time.monotonic()
    for table in tables:
        frame = (
            spark.read.format("jdbc")
            .option("url", f"jdbc:postgresql://127.0.0.1:{src.port}/{src_db}")
            .option("user", "postgres").option("dbtable", f"digoal_01.{table}")
            .option("driver", "org.postgresql.Driver").option("fetchsize", "10000")
            .load()
        )  # fmt: skip
        (
            frame.write.format("jdbc")
            .option("url", f"jdbc:postgresql://127.0.0.1:{dst.port}/{dst_db}?stringtype=unspecified")
            .option("user", "postgres").option("dbtable", f"digoal_01.{table}")
            .option("driver", "org.postgresql.Driver").option("batchsize", "10000")
            .option("truncate", "true").mode("append").save()
        )  # fmt: skip
    return time.monotonic() - started


def arrow_read(spark, src: str, table: str) -> tuple[float, int]:
    """Read a whole table into Spark as Arrow batches (the repair path) and count it."""
    from pgferry.sync import repair
    from pgferry.sync.compare import CompareTask

    repair.read_table_count(spark, src, CompareTask(table, table))  # warm-up: Arrow, workers
    started = time.monotonic()
    rows = repair.read_table_count(spark, src, CompareTask(table, table))
    return time.monotonic() - started, rows


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--login-rows", type=int, default=5_000_000)
    parser.add_argument("--schema", type=Path, default=SCHEMA)
    parser.add_argument("--skip-alternatives", action="store_true")
    args = parser.parse_args()
    print(machine(), flush=True)
    src, dst = start_clusters("copy")
    try:
        spark = bench_spark()
        src_seed = create_seed_db(src, "digoal_01", args.schema, fill=True)
        dst_seed = create_seed_db(dst, "digoal_01", args.schema, fill=False)
        seed_rows = count_rows(src_seed, SEED_TABLES)
        src_big = create_login_db(src, "login_5m", args.schema, args.login_rows)
        dst_big = create_login_db(dst, "login_5m", args.schema, 0)
        big = ("user_login_rec",)
        results: dict[str, list[float]] = {k: [] for k in ("pipe4", "copy4", "pipe5m", "copy5m")}
        for rep in range(args.reps):
            truncate(dst_seed, SEED_TABLES)
            results["pipe4"].append(raw_pipe(src, "digoal_01", dst, "digoal_01", SEED_TABLES))
            truncate(dst_seed, SEED_TABLES)
            seconds, rows = pgferry_copy(spark, src_seed, dst_seed, SEED_TABLES)
            assert rows == seed_rows == count_rows(dst_seed, SEED_TABLES), (rows, seed_rows)
            results["copy4"].append(seconds)
            truncate(dst_big, big)
            results["pipe5m"].append(raw_pipe(src, "login_5m", dst, "login_5m", big))
            truncate(dst_big, big)
            seconds, rows = pgferry_copy(spark, src_big, dst_big, big)
            assert rows == args.login_rows, rows
            results["copy5m"].append(seconds)
            print(f"rep {rep + 1}: " + ", ".join(f"{k}={v[-1]:.2f}s" for k, v in results.items()),
                  flush=True)  # fmt: skip
        print()
        print("| what | rows | median s | min | max | rows/s | vs raw pipe |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for key, label, rows, anchor in (
            ("pipe4", "raw psql pipe, 4 seed tables", seed_rows, "pipe4"),
            ("copy4", "pgferry copy_tables, 4 seed tables", seed_rows, "pipe4"),
            ("pipe5m", "raw psql pipe, user_login_rec", args.login_rows, "pipe5m"),
            ("copy5m", "pgferry copy_tables, user_login_rec", args.login_rows, "pipe5m"),
        ):
            vals = results[key]
            speed = statistics.median(results[anchor]) / statistics.median(vals)
            print(
                f"| {label} | {rows:,} | {median(vals)} | {min(vals):.2f} | {max(vals):.2f} "
                f"| {rows / statistics.median(vals):,.0f} | {speed:.2f}x |"
            )
        if not args.skip_alternatives:
            truncate(dst_seed, SEED_TABLES)
            seconds = jdbc_copy(spark, src, dst, "digoal_01", "digoal_01", SEED_TABLES)
            print(f"| Spark JDBC read+write, 4 seed tables (n=1) | {seed_rows:,} | {seconds:.2f} "
                  f"| | | {seed_rows / seconds:,.0f} | "
                  f"{statistics.median(results['pipe4']) / seconds:.2f}x |")  # fmt: skip
            seconds, rows = arrow_read(spark, src_big, "digoal_01.user_login_rec")
            print(f"| read only into Spark (COPY csv -> Arrow, mapInArrow), user_login_rec "
                  f"(n=1) | {rows:,} | {seconds:.2f} | | | {rows / seconds:,.0f} | "
                  f"{statistics.median(results['pipe5m']) / seconds:.2f}x |")  # fmt: skip
    finally:
        src.destroy()
        dst.destroy()


if __name__ == "__main__":
    sys.exit(main())
