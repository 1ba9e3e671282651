"""The seed walkthrough (items 1-18) in miniature, through the real command line.

Root on the session cluster A; both subscribers on a cluster of this module's own, because
the test stops and starts it under load.  Workers and the ticker run as ``-d`` daemons (each
subscriber worker with its own small Spark), faults are injected while a writer keeps the
source busy, and after each fault every replicated table must equal its source again.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgferry.daemon import read_pid
from pgferry.testing.cluster import LocalCluster, make_cluster
from pgferry.testing.commands import run_pgferry
from pgferry.testing.load import Load
from pgferry.testing.scenario import process_running, sql, wait_until
from pgferry.testing.seed import seed_fill, seed_schema

SCHEMA = seed_schema()
PARTIAL = seed_schema("digoal_02", suffix="1")
ROWS = 3000
TABLES = ("digoal_01.user_info", "digoal_01.user_session")


@pytest.fixture(scope="module")
def sub_cluster() -> Iterator[LocalCluster]:
    cluster = make_cluster("e2e-sub")
    yield cluster
    cluster.destroy()


def _login(conn: psycopg.Connection, done: int) -> None:
    """A pgbench-like transaction (login / logout) on the source."""
    i = done + 1
    uid = (i * 7919) % ROWS + 1
    conn.execute(
        "update digoal_01.user_session set logintime = now(),"
        " login_count = login_count + 1 where userid = %s",
        (uid,),
    )
    conn.execute("update digoal_01.user_info set mod_time = now() where userid = %s", (uid,))
    if i % 10 == 0:
        conn.execute(
            "insert into digoal_01.user_info (userid, engname) values (%s, 'n')"
            " on conflict (userid) do update set engname = 'again'",
            (ROWS + i,),
        )


def source_load(dsn: str) -> Load:
    """The login load on the source, in a thread, until the block ends."""
    return Load(dsn, _login, every=0.002)


class Cli:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def __call__(self, *args: str, check: int | None = 0, timeout: float = 300) -> str:
        proc = run_pgferry(*args, timeout=timeout, cwd=self.workdir)
        if check is not None:
            assert proc.returncode == check, (args, proc.stdout, proc.stderr)
        return proc.stdout + proc.stderr


@pytest.mark.slow
def test_walkthrough(pg_a: LocalCluster, sub_cluster: LocalCluster, tmp_path: Path) -> None:
    src = pg_a.createdb(f"digoal_01_{os.getpid()}")
    dst1 = sub_cluster.createdb("digoal_01")
    dst2 = sub_cluster.createdb("digoal_02")
    cli = Cli(tmp_path)
    common = (
        f"queue_name = replika\nlogfile = {tmp_path}/log/%(job_name)s.log\n"
        f"pidfile = {tmp_path}/pid/%(job_name)s.pid\nloop_delay = 0.2\nexception_sleep = 1\n"
        "parallel_copies = 4\nlock_timeout = 120\nspark_master = local[1]\n"
        "spark.sql.shuffle.partitions = 2\n"
    )
    for name, dsn in (("src_digoal_01", src), ("dst1_digoal_01", dst1), ("dst2_digoal_02", dst2)):
        (tmp_path / f"{name}.ini").write_text(
            f"[londiste3]\njob_name = {name}\ndb = {dsn}\n{common}"
        )
    (tmp_path / "pgqd.ini").write_text(
        f"[pgqd]\nbase_connstr = host=127.0.0.1 port={pg_a.port} user=postgres\n"
        f"database_list = {src.split('dbname=')[1]}\nticker_period = 0.2\n"
        f"logfile = {tmp_path}/log/pgqd.log\npidfile = {tmp_path}/pid/pgqd.pid\n"
    )
    sql(src, SCHEMA + seed_fill(ROWS))
    sql(dst1, SCHEMA)
    sql(dst2, PARTIAL)
    pids = tmp_path / "pid"

    def pid_of(job: str) -> int | None:
        pid = read_pid(pids / f"{job}.pid")
        return pid if pid is not None and process_running(pid) else None

    def wait_gone(job: str) -> None:
        wait_until(lambda: pid_of(job) is None, 60, f"{job} to exit")

    def equal(dsn: str, table: str, dest: str | None = None, cond: str = "true") -> bool:
        q = "select md5(coalesce(string_agg(t::text, '|' order by t.userid), '')) from {} t"
        return sql(src, q.format(table) + f" where {cond}") == sql(dsn, q.format(dest or table))

    def all_equal() -> bool:
        return all(equal(dst1, t) for t in TABLES)

    def position(dsn: str) -> int:
        return sql(dsn, "select last_tick_id from ferry_node.local_state")[0][0] or 0

    def applying(dsn: str, what: str, batches: int = 2) -> None:
        """Wait until the node's worker applied ``batches`` more batches (of the load that
        runs): a fault then meets replication at work, not an idle worker."""
        start = position(dsn)
        wait_until(lambda: position(dsn) >= start + batches, 60, what)

    def errors_logged(job: str) -> int:
        return (tmp_path / "log" / f"{job}.log").read_text().count(" ERROR ")

    try:
        # 1-4: nodes, workers, ticker
        cli("src_digoal_01.ini", "create-root", "src_digoal_01", src)
        cli("-d", "src_digoal_01.ini", "worker")
        cli("dst1_digoal_01.ini", "create-leaf", "dst1_digoal_01", dst1, f"--provider={src}")
        cli("-d", "dst1_digoal_01.ini", "worker")
        cli("-d", "pgqd.ini", "ticker")
        # 8: tables on root and leaf; copies in parallel, then ok
        cli("src_digoal_01.ini", "add-table", *TABLES)
        cli("dst1_digoal_01.ini", "add-table", *TABLES)
        wait_until(
            lambda: (
                sql(dst1, "select count(*) from ferry.table_info where merge_state = 'ok'")
                == [(2,)]
            ),
            180,
            "tables ok on dst1",
        )
        status = cli("dst1_digoal_01.ini", "status")
        assert "dst1_digoal_01" in status
        # 12-14: load, then compare (at one tick, while the load still runs)
        with source_load(src):
            applying(dst1, "dst1 replaying the load")
            assert "Results do not match" not in cli("dst1_digoal_01.ini", "compare")
        wait_until(all_equal, 120, "dst1 after load")
        # 15: subscriber database stopped and restarted under load
        with source_load(src) as load:
            applying(dst1, "dst1 replaying the load")
            failed = errors_logged("dst1_digoal_01")
            sub_cluster.stop()
            # Down until its worker met the stopped database and the load went on meanwhile.
            done = load.done
            wait_until(
                lambda: errors_logged("dst1_digoal_01") > failed and load.done >= done + 100,
                60,
                "dst1's worker to fail on its stopped database",
            )
            sub_cluster.start()
            applying(dst1, "dst1 replaying after its restart", batches=1)
        wait_until(all_equal, 180, "dst1 after its restart")
        errors = sql(dst1, "select cur_error from ferry_node.local_state")
        assert errors == [(None,)]
        # SIGKILL of the worker mid-load, then -d again
        with source_load(src):
            applying(dst1, "dst1 replaying the load")
            pid = pid_of("dst1_digoal_01")
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            wait_gone("dst1_digoal_01")
            cli("-d", "dst1_digoal_01.ini", "worker")
            applying(dst1, "the new dst1 worker replaying", batches=1)
        wait_until(all_equal, 180, "dst1 after SIGKILL")
        # 17: root worker, leaf worker and ticker stopped with -s, load, then -d
        for ini, job in (
            ("src_digoal_01.ini", "src_digoal_01"),
            ("dst1_digoal_01.ini", "dst1_digoal_01"),
            ("pgqd.ini", "pgqd"),
        ):
            cli("-s", ini, "worker" if job != "pgqd" else "ticker")
            wait_gone(job)
        with source_load(src) as load:  # a backlog while nothing runs
            wait_until(lambda: load.done >= 300, 60, "a backlog of the load")
        cli("-d", "pgqd.ini", "ticker")
        cli("-d", "src_digoal_01.ini", "worker")
        cli("-d", "dst1_digoal_01.ini", "worker")
        wait_until(all_equal, 180, "dst1 after -s / -d")
        # 16: TRUNCATE replicates
        sql(src, "truncate digoal_01.user_session")
        sql(src, "insert into digoal_01.user_session (userid) values (1), (2)")
        wait_until(all_equal, 120, "dst1 after truncate")
        # 18: partial, renamed leaf
        cli("dst2_digoal_02.ini", "create-leaf", "dst2_digoal_02", dst2, f"--provider={src}")
        cli("-d", "dst2_digoal_02.ini", "worker")
        for table, dest in zip(
            TABLES, ("digoal_02.user_info1", "digoal_02.user_session1"), strict=True
        ):
            cli(
                "dst2_digoal_02.ini",
                "add-table",
                f"--dest-table={dest}",
                "--copy-condition=userid<1000",
                table,
            )

        def partial_equal() -> bool:
            return equal(dst2, TABLES[0], "digoal_02.user_info1", "userid<1000") and equal(
                dst2, TABLES[1], "digoal_02.user_session1", "userid<1000"
            )

        with source_load(src):
            wait_until(
                lambda: (
                    sql(dst2, "select count(*) from ferry.table_info where merge_state='ok'")
                    == [(2,)]
                ),
                180,
                "tables ok on dst2",
            )
            applying(dst2, "dst2 replaying the load")
        wait_until(partial_equal, 180, "dst2 partial tables")
        assert "Results do not match" not in cli("dst2_digoal_02.ini", "compare")
        assert "Results do not match" not in cli("dst1_digoal_01.ini", "compare")
        tables = cli("dst2_digoal_02.ini", "tables")
        assert "userid<1000" in tables
        # 19-21: DDL through the queue reaches both leaves, the renamed one under its names
        (tmp_path / "add_column.sql").write_text(
            "BEGIN;\nalter table digoal_01.user_info add column c1 int;\n"
            "alter table digoal_01.user_session add column c1 int;\nEND;\n"
        )
        refused = cli("dst1_digoal_01.ini", "execute", "add_column.sql", check=1)
        assert "Node is not root node: replika" in refused
        cli("src_digoal_01.ini", "execute", "add_column.sql")
        with source_load(src):
            sql(src, "update digoal_01.user_info set c1 = userid % 100")
            sql(src, "update digoal_01.user_session set c1 = 1 where userid < 2000")
        wait_until(all_equal, 180, "dst1 after execute")
        wait_until(partial_equal, 180, "dst2 after execute")
        for dsn, table in ((dst1, "digoal_01.user_info"), (dst2, "digoal_02.user_info1")):
            assert sql(dsn, f"select count(c1) > 0 from {table}") == [(True,)]
        assert "ERR:" not in cli("src_digoal_01.ini", "status")
    finally:
        for ini, cmd in (
            ("dst2_digoal_02.ini", "worker"),
            ("dst1_digoal_01.ini", "worker"),
            ("src_digoal_01.ini", "worker"),
            ("pgqd.ini", "ticker"),
        ):
            cli("-k", ini, cmd, check=None)
        for job in ("dst2_digoal_02", "dst1_digoal_01", "src_digoal_01", "pgqd"):
            pid = pid_of(job)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
