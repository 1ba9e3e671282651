"""Copy of one large table: pgferry's one-snapshot copy, its chunked copy, the raw psql pipe
and pgcopydb, between two throw-away clusters.

The table (``--rows``, default 2,000,000: an int key, an int, a timestamp and 60 bytes of
text) is copied into an empty table of the same shape, with its primary key, by (pgferry's
copies and pgcopydb drop the key for the load and build it at the end; the pipe keeps it):

* ``psql -c "\\copy t to stdout" | psql -c "\\copy t from stdin"`` (the anchor);
* ``copy_tables`` (one exported snapshot, block ranges in Spark tasks; Spark's start is
  timed apart, and included in the figure a user would see);
* ``copy_chunked`` (key ranges of ``--chunk-rows`` in short transactions, taken in order
  by two streams of the driver; no Spark);
* ``pgcopydb clone`` of a database holding only the table (Debian package ``pgcopydb``;
  run in a session of its own with ``setsid``: it signals its whole process group when it
  ends), when it is installed.

Each destination is truncated (or, for pgcopydb, dropped and created) before each run.

Two more measurements:

* kill at 50 %: the chunked copy run in a child process (as a worker runs it), that process
  sent SIGKILL once half the chunks are recorded on the destination, then a new one started
  that resumes with the chunks not recorded; its time to finish against the same copy run
  whole in a child process (goal: at most 0.6x);
* the source's throughput under a pgbench load (``pgbench -n -c --load-clients``, TPC-B like,
  scale ``--load-scale``, in a database ``load`` of its own on the source cluster, so that
  pgcopydb still clones only the table): transactions per second during each of the four
  copies, made again with the load running, against the same load with no copy (a window of
  ``--tps-seconds`` before the copies and one after).  Counted from the rows the load adds
  to ``pgbench_history``, one per transaction.  ``--no-load`` leaves this out.

    .venv/bin/python -m bench.copy_chunked [--rows 2000000] [--chunk-rows 100000] [--reps 1]
        [--load-clients 4] [--load-scale 10] [--tps-seconds 10] [--no-load]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg

from bench.common import machine, write_results
from bench.copy_seed import start_clusters
from pgferry.testing.cluster import LocalCluster

TABLE = "create table public.t (id bigint primary key, v int, at timestamptz, s text)"
T = TypeVar("T")
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


# --- the chunked copy in a child process, killed at 50 % ---------------------------------


def _child(argv: list[str]) -> None:
    """``--child SRC DST COPY_ID CHUNK_ROWS RESUME``: one chunked copy, then exit."""
    from pgferry.pipeline.copy import CopyTask
    from pgferry.pipeline.copy.chunked import copy_chunked

    src, dst, copy_id, chunk_rows, resume = argv
    copy_chunked(src, dst, [CopyTask("public.t", "public.t")], copy_id=copy_id,
                 chunk_rows=int(chunk_rows), resume=resume == "1")  # fmt: skip


def _spawn(src: str, dst: str, copy_id: str, chunk_rows: int, resume: bool) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.copy_chunked", "--child", src, dst, copy_id,
         str(chunk_rows), "1" if resume else "0"],
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip


def _finish(proc: subprocess.Popen) -> None:
    if proc.wait() != 0:
        raise SystemExit(f"chunked copy process ended with {proc.returncode}")


def chunked_whole(src: str, dst: str, chunk_rows: int) -> float:
    """The chunked copy in a child process, uninterrupted (process start included)."""
    started = time.monotonic()
    _finish(_spawn(src, dst, uuid.uuid4().hex, chunk_rows, resume=False))
    return time.monotonic() - started


def _progress(conn: psycopg.Connection, copy_id: str) -> tuple[int, int]:
    """(chunks planned, chunks recorded) of ``copy_id`` on the destination."""
    if conn.execute("select to_regclass('ferry_copy.chunk')").fetchone() == (None,):
        return 0, 0  # the copy has not made its bookkeeping yet
    row = conn.execute(
        "select (select count(*) from ferry_copy.chunk where copy_id = %s),"
        " (select count(*) from ferry_copy.range_done where copy_id = %s)",
        (copy_id, copy_id),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def chunked_killed(src: str, dst: str, chunk_rows: int) -> dict[str, float | int]:
    """The chunked copy's process sent SIGKILL once half its chunks are recorded, then a
    new one resuming it: seconds to the kill, and from the restart to the end."""
    copy_id = uuid.uuid4().hex
    started = time.monotonic()
    proc = _spawn(src, dst, copy_id, chunk_rows, resume=False)
    with psycopg.connect(dst, autocommit=True) as conn:
        while True:
            planned, done = _progress(conn, copy_id)
            if planned and done * 2 >= planned:
                break
            if proc.poll() is not None:
                raise SystemExit("the chunked copy ended before half its chunks were recorded")
            time.sleep(0.01)  # polling the records: the kill comes within 10 ms of the half
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    _finish(_spawn(src, dst, copy_id, chunk_rows, resume=True))
    return {"to_kill_s": round(killed - started, 2),
            "after_restart_s": round(time.monotonic() - killed, 2),
            "chunks": planned, "recorded_at_kill": done}  # fmt: skip


# --- a pgbench load on the source --------------------------------------------------------


class Pgbench:
    """``pgbench`` TPC-B like transactions on the source's database ``load``, in the
    background; :meth:`count` reads how many have committed (one history row each)."""

    def __init__(self, cluster: LocalCluster, clients: int, scale: int) -> None:
        local = cluster.bindir / "pgbench"
        self.exe = str(local) if local.exists() else shutil.which("pgbench") or "pgbench"
        self.dsn = cluster.createdb("load")
        self.conn_args = ["-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres"]
        self.clients = clients
        subprocess.run([self.exe, "-i", "-q", "-s", str(scale), *self.conn_args, "load"],
                       check=True, capture_output=True)  # fmt: skip
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.exe, "-n", "-c", str(self.clients), "-j", str(min(self.clients, 2)),
             "-T", "86400", *self.conn_args, "load"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None

    def count(self) -> int:
        with psycopg.connect(self.dsn) as conn:
            return conn.execute("select count(*) from pgbench_history").fetchone()[0]  # type: ignore[index]

    def tps(self, during: Callable[[], T]) -> tuple[float, T]:
        """Transactions per second while ``during`` runs, and what it returned."""
        n0, t0 = self.count(), time.monotonic()
        got = during()
        n1, t1 = self.count(), time.monotonic()
        return (n1 - n0) / (t1 - t0), got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--chunk-rows", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--load-clients", type=int, default=4)
    parser.add_argument("--load-scale", type=int, default=10)
    parser.add_argument("--tps-seconds", type=float, default=10.0)
    parser.add_argument("--no-load", action="store_true")
    args = parser.parse_args()
    started_at = dt.datetime.now(dt.UTC)
    src, dst = start_clusters("chunked")
    load: Pgbench | None = None
    try:
        src_dsn, dst_dsn = src.createdb("bench"), dst.createdb("bench")
        for dsn in (src_dsn, dst_dsn):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(TABLE)
        with psycopg.connect(src_dsn, autocommit=True) as conn:
            conn.execute(FILL, (args.rows,))
            conn.execute("vacuum analyze public.t")
            size = conn.execute("select pg_size_pretty(pg_table_size('public.t'))").fetchone()
        from bench.copy_seed import bench_spark

        t0 = time.monotonic()
        spark = bench_spark()
        spark_start = time.monotonic() - t0
        work = f"{dst.datadir.parent}/pgcopydb-work"

        def copies() -> dict[str, Callable[[Pgbench | None], tuple[float | None, float | None]]]:
            """Each copy, its destination made empty first (not timed); with a load, the
            source's tps during the copy alone too."""

            def fresh(copy: Callable[[], float | None], check: bool = True):
                def run(load: Pgbench | None = None) -> tuple[float | None, float | None]:
                    _truncate(dst_dsn)
                    rate, took = (None, copy()) if load is None else load.tps(copy)
                    if check:
                        assert _count(dst_dsn) == args.rows
                    return took, rate

                return run

            return {
                "raw_pipe": fresh(lambda: raw_pipe(src, dst)),
                "one_snapshot": fresh(lambda: one_snapshot(spark, src_dsn, dst_dsn)),
                "chunked": fresh(lambda: chunked(src_dsn, dst_dsn, args.chunk_rows)),
                "pgcopydb": fresh(lambda: pgcopydb(src, dst, work), check=False),
            }

        figures: dict[str, list[float]] = {
            k: [] for k in (*copies(), "chunked_process", "chunked_after_kill")
        }
        kills: list[dict[str, float | int]] = []
        for _ in range(args.reps):
            for name, run in copies().items():
                took, _ = run()
                if took is not None:
                    figures[name].append(took)
            _truncate(dst_dsn)
            figures["chunked_process"].append(chunked_whole(src_dsn, dst_dsn, args.chunk_rows))
            assert _count(dst_dsn) == args.rows
            _truncate(dst_dsn)
            kills.append(chunked_killed(src_dsn, dst_dsn, args.chunk_rows))
            assert _count(dst_dsn) == args.rows
            figures["chunked_after_kill"].append(float(kills[-1]["after_restart_s"]))
        tps: dict[str, list[float]] = {}
        loaded: dict[str, list[float]] = {}
        if not args.no_load:
            load = Pgbench(src, args.load_clients, args.load_scale)
            load.start()
            load.tps(lambda: time.sleep(2))  # not counted: the clients connect, caches warm
            tps["no_copy"] = [load.tps(lambda: time.sleep(args.tps_seconds))[0]]
            for _ in range(args.reps):
                for name, run in copies().items():
                    if name == "pgcopydb" and shutil.which("pgcopydb") is None:
                        continue
                    took, rate = run(load)
                    assert took is not None and rate is not None
                    tps.setdefault(name, []).append(rate)
                    loaded.setdefault(name, []).append(took)
            tps["no_copy"].append(load.tps(lambda: time.sleep(args.tps_seconds))[0])
            load.stop()
        spark.stop()
        median = {k: round(statistics.median(vs), 2) for k, vs in figures.items() if vs}
        ratio = None
        if figures["chunked_after_kill"]:
            ratio = round(median["chunked_after_kill"] / median["chunked_process"], 2)
        base = statistics.mean(tps["no_copy"]) if tps else None
        doc = {
            "rows": args.rows,
            "table_size": size[0] if size else None,
            "chunk_rows": args.chunk_rows,
            "spark_start_s": round(spark_start, 2),
            "seconds": {k: [round(v, 2) for v in vs] for k, vs in figures.items()},
            "median_s": median,
            "kill_at_half": kills,
            "after_kill_vs_whole": ratio,
            "load": None
            if args.no_load
            else {
                "clients": args.load_clients,
                "scale": args.load_scale,
                "tps": {k: [round(v, 1) for v in vs] for k, vs in tps.items()},
                "tps_vs_no_copy": {
                    k: round(statistics.median(vs) / base, 2)
                    for k, vs in tps.items()
                    if k != "no_copy" and base
                },
                "copy_seconds_under_load": {
                    k: [round(v, 2) for v in vs] for k, vs in loaded.items()
                },
            },  # fmt: skip
            "machine": machine(),
            "started": started_at.isoformat(timespec="seconds"),
        }
        path = write_results(doc, "copy_chunked", started_at, None)
        for name, value in median.items():
            print(f"{name:>18}: {value:7.2f} s")
        print(f"{'spark start':>18}: {spark_start:7.2f} s (not in one_snapshot)")
        if ratio is not None:
            k = kills[-1]
            print(f"{'killed at half':>18}: {k['recorded_at_kill']}/{k['chunks']} chunks;"
                  f" after the restart {ratio:.2f}x the whole copy (goal <= 0.6x)")  # fmt: skip
        if doc["load"]:
            print(f"{'tps, no copy':>18}: {' / '.join(f'{v:.0f}' for v in tps['no_copy'])}"
                  " (before / after the copies; their mean is 1x)")  # fmt: skip
            for name, rel in doc["load"]["tps_vs_no_copy"].items():
                rate = statistics.median(tps[name])
                print(f"{'tps, ' + name:>18}: {rate:7.0f} ({rel:.2f}x), copy"
                      f" {statistics.median(loaded[name]):.2f} s under load")  # fmt: skip
        print(f"results: {path}")
    finally:
        if load is not None:
            load.stop()
        src.stop()
        dst.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
    else:
        main()
