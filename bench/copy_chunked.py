"""Copy of one large table: pgferry's one-snapshot copy, its chunked copy, the raw psql pipe
and pgcopydb, between two throw-away clusters.

The table (``--rows``, default 2,000,000: an int key, an int, a timestamp and 60 bytes of
text) is copied into an empty table of the same shape, primary key kept, by:

* ``psql -c "\\copy t to stdout" | psql -c "\\copy t from stdin"`` (the anchor);
* ``copy_tables`` (one exported snapshot, block ranges in Spark tasks; Spark's start is
  timed apart, and included in the figure a user would see);
* ``copy_chunked`` (key ranges of ``--chunk-rows`` in short transactions, one after
  another on the driver; no Spark);
* ``pgcopydb clone`` of a database holding only the table (Debian package ``pgcopydb``;
  run in a session of its own with ``setsid``: it signals its whole process group when it
  ends), when it is installed.

Each destination is truncated (or, for pgcopydb, dropped and created) before each run.

    .venv/bin/python -m bench.copy_chunked [--rows 2000000] [--chunk-rows 100000] [--reps 1]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import time

import psycopg

from bench.common import machine, write_results
from bench.copy_seed import start_clusters
from pgferry.testing.cluster import LocalCluster

TABLE = "create table public.t (id bigint primary key, v int, at timestamptz, s text)"
FILL = (
    "insert into public.t select g, (g * 7) %% 1000, now(), repeat(md5(g::text), 2)"
    " from generate_series(1, %s) g"
)


def _psql(cluster: LocalCluster, db: str, command: str) -> list[str]:
    local = cluster.bindir / "psql"
    psql = str(local) if local.exists() else shutil.which("psql") or "psql"
    return [psql, "-X", "-q", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
            "-d", db, "-c", command]  # fmt: skip


def _truncate(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("truncate public.t")
        conn.execute("checkpoint")


def _count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("select count(*) from public.t").fetchone()[0]  # type: ignore[index]


def raw_pipe(src: LocalCluster, dst: LocalCluster) -> float:
    started = time.monotonic()
    out = subprocess.Popen(_psql(src, "bench", "\\copy public.t to stdout"),
                           stdout=subprocess.PIPE)  # fmt: skip
    subprocess.run(_psql(dst, "bench", "\\copy public.t from stdin"), stdin=out.stdout,
                   check=True)  # fmt: skip
    out.stdout.close()  # type: ignore[union-attr]
    if out.wait() != 0:
        raise SystemExit("psql \\copy out failed")
    return time.monotonic() - started


def one_snapshot(spark, src: str, dst: str) -> float:
    from pgferry.pipeline.copy import CopyTask, copy_tables

    started = time.monotonic()
    copy_tables(spark, src, dst, [CopyTask("public.t", "public.t")], progress=False)
    return time.monotonic() - started


def chunked(src: str, dst: str, chunk_rows: int) -> float:
    import uuid

    from pgferry.pipeline.copy import CopyTask
    from pgferry.pipeline.copy.chunked import copy_chunked

    started = time.monotonic()
    copy_chunked(src, dst, [CopyTask("public.t", "public.t")], copy_id=uuid.uuid4().hex,
                 chunk_rows=chunk_rows)  # fmt: skip
    return time.monotonic() - started


def pgcopydb(src: LocalCluster, dst: LocalCluster, work: str) -> float | None:
    exe = shutil.which("pgcopydb")
    if exe is None:
        return None
    with psycopg.connect(dst.connstr("postgres"), autocommit=True) as conn:
        conn.execute("drop database if exists bench_pgcopydb")
        conn.execute("create database bench_pgcopydb")
    uri = "postgresql://postgres@127.0.0.1:{}/{}"
    shutil.rmtree(work, ignore_errors=True)
    started = time.monotonic()
    # A session of its own: pgcopydb signals its whole process group when it ends.
    env = {**os.environ, "PATH": f"{src.bindir}:{os.environ.get('PATH', '')}"}
    subprocess.run(
        ["setsid", "--wait", exe, "clone", "--source", uri.format(src.port, "bench"),
         "--target", uri.format(dst.port, "bench_pgcopydb"), "--dir", work, "--no-owner",
         "--no-acl"],
        check=True, capture_output=True, env=env,
    )  # fmt: skip
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--chunk-rows", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    started_at = dt.datetime.now(dt.UTC)
    src, dst = start_clusters("chunked")
    try:
        src_dsn, dst_dsn = src.createdb("bench"), dst.createdb("bench")
        for dsn in (src_dsn, dst_dsn):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(TABLE)
        with psycopg.connect(src_dsn, autocommit=True) as conn:
            conn.execute(FILL, (args.rows,))
            conn.execute("vacuum analyze public.t")
            size = conn.execute("select pg_size_pretty(pg_table_size('public.t'))").fetchone()
        figures: dict[str, list[float]] = {"raw_pipe": [], "one_snapshot": [], "chunked": [],
                                           "pgcopydb": []}  # fmt: skip
        from bench.copy_seed import bench_spark

        t0 = time.monotonic()
        spark = bench_spark()
        spark_start = time.monotonic() - t0
        for _ in range(args.reps):
            _truncate(dst_dsn)
            figures["raw_pipe"].append(raw_pipe(src, dst))
            assert _count(dst_dsn) == args.rows
            _truncate(dst_dsn)
            figures["one_snapshot"].append(one_snapshot(spark, src_dsn, dst_dsn))
            assert _count(dst_dsn) == args.rows
            _truncate(dst_dsn)
            figures["chunked"].append(chunked(src_dsn, dst_dsn, args.chunk_rows))
            assert _count(dst_dsn) == args.rows
            took = pgcopydb(src, dst, f"{dst.datadir.parent}/pgcopydb-work")
            if took is not None:
                figures["pgcopydb"].append(took)
        spark.stop()
        doc = {
            "rows": args.rows,
            "table_size": size[0] if size else None,
            "chunk_rows": args.chunk_rows,
            "spark_start_s": round(spark_start, 2),
            "seconds": {k: [round(v, 2) for v in vs] for k, vs in figures.items()},
            "median_s": {k: round(statistics.median(vs), 2) for k, vs in figures.items() if vs},
            "machine": machine(),
            "started": started_at.isoformat(timespec="seconds"),
        }
        path = write_results(doc, "copy_chunked", started_at, None)
        for name, value in doc["median_s"].items():
            print(f"{name:>14}: {value:7.2f} s")
        print(f"{'spark start':>14}: {spark_start:7.2f} s (not in one_snapshot)")
        print(f"results: {path}")
    finally:
        src.stop()
        dst.stop()


if __name__ == "__main__":
    main()
