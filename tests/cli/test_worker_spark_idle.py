"""A worker's Spark comes up for work that needs it and goes, with its JVM, once unused.

A small table is copied without Spark; a batch too large for the driver is applied on the
driver and brings Spark up once the worker is caught up; unused, it goes, and the caught-up
worker's whole process tree is small again while replay goes on.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgferry.polling import wait_until

GOAL_MB = 150  # a caught-up leaf worker, all its processes


def sql(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query)
        return cur.fetchall() if cur.description else []


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rss_mb(pid: int) -> float:
    total = 0
    for p in (pid, *descendants(pid)):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def has_jvm(pid: int) -> bool:
    for p in descendants(pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].endswith(b"java"):
                return True
    return False


@contextlib.contextmanager
def ticking(dsn: str) -> Iterator[None]:
    """A tick on the root every 0.3 s, as the ticker daemon would make them."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.3):
            with contextlib.suppress(psycopg.Error):
                sql(dsn, "select ferry_queue.force_tick('replika')")
                sql(dsn, "select ferry_queue.ticker('replika')")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.mark.slow
def test_spark_goes_when_unused(db_a, db_b, write_ini, cli, tmp_path) -> None:
    for dsn in (db_a, db_b):
        sql(dsn, "create table t (id int primary key, v text)")
    sql(db_a, "insert into t select g, 'v' || g from generate_series(1, 2000) g")
    root_ini = write_ini("src", db_a)
    leaf_ini = write_ini(
        "dst",
        db_b,
        loop_delay="0.1",
        spark_master="local[1]",
        spark_idle_timeout="1",
        replay_local_events="1000",
    )
    assert cli(root_ini, "create-root", "src").code == 0
    assert cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0
    assert cli(root_ini, "add-table", "t").code == 0
    assert cli(leaf_ini, "add-table", "t").code == 0
    log = tmp_path / "log" / "dst.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "pgferry", "-v", str(leaf_ini), "worker"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with ticking(db_a):
            ok = "select merge_state from ferry.table_info"
            wait_until(lambda: sql(db_b, ok) == [("ok",)], timeout=180, what="the copy")
            assert "Spark session started" not in log.read_text()  # copied on the driver
            assert "Starting Spark" not in log.read_text()
            assert not has_jvm(worker.pid)

            # A batch of 2,000 events is over replay_local_events: applied on the driver,
            # it brings Spark up once the worker is caught up.
            sql(db_a, "update t set v = 'after'")
            after = "select count(*) from t where v = 'after'"
            wait_until(lambda: sql(db_b, after) == [(2000,)], timeout=60, what="replay")
            wait_until(
                lambda: "Spark session started" in log.read_text(), timeout=120, what="Spark"
            )
            # Said once, before the wait it announces.
            assert log.read_text().count("INFO Starting Spark (local[1]); this takes ~20 s") == 1
            wait_until(lambda: not has_jvm(worker.pid), timeout=60, what="the JVM to go")
            assert "Spark unused for 1 s: stopping it" in log.read_text()
            assert rss_mb(worker.pid) < GOAL_MB

            # Replay goes on without Spark.
            sql(db_a, "update t set v = 'later' where id % 10 = 0")
            later = "select count(*) from t where v = 'later'"
            wait_until(lambda: sql(db_b, later) == [(200,)], timeout=60, what="replay")
            assert not has_jvm(worker.pid)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    same = "select * from t order by id"
    assert sql(db_a, same) == sql(db_b, same)
