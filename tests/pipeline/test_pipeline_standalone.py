"""Copy, compare and `pgferry diff` on a real Spark standalone cluster (master + worker), and
a node's worker sharing the cluster with the node's own commands.

The cluster (one Spark worker, 2 cores) is started from the pyspark package on 127.0.0.1.
Spark allows one SparkContext per process and this one may hold the shared local session,
so the jobs run in child processes whose sessions point at ``spark://127.0.0.1:PORT``.
Every JVM here compiles with C1 only, as all the tests' (the session's ``short_lived_jvms``;
the executors through the worker's environment): the tests' time is mostly JVM starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from pipeline_sql import fetch, run_sql

from pgferry.polling import wait_until
from pgferry.sync import compare
from pgferry.sync.compare import CompareTask, compare_tables
from pgferry.testing.cluster import free_port
from pgferry.testing.spark_env import short_lived_jvm_env, spark_env, spark_home

pytestmark = pytest.mark.cluster

SCRIPT = r"""
import json, sys
from pipeline_sql import run_sql
from test_pipeline_standalone import figures
from pgferry.cli.main import main
from pgferry.sync import compare
from pgferry.sync.compare import CompareTask, compare_tables
from pgferry.pipeline.copy import CopyTask, copy_tables
from pgferry.pipeline.spark import get_spark

master, src, dst = sys.argv[1:4]
import pgferry.pipeline.copy as copy_pkg
copy_pkg.LOCAL_PAGES = compare.LOCAL_PAGES = -1  # small tables too: on the cluster
spark = get_spark(master=master, app_name="pgferry-standalone-test",
                  settings={"spark.executor.memory": "512m", "spark.cores.max": "2"})
assert spark.sparkContext.master == master
copied = copy_tables(spark, src, dst, [CopyTask("events", "events"), CopyTask("users", "users")],
                     progress=False)
compared = compare_tables(spark, src, dst, [CompareTask("events", "events"),
                                            CompareTask("users", "users")])
# The CLI in the same process reuses the session on the cluster.
code = main(["diff", src, "events", dst, "events", "--set", "spark_master=" + master])
run_sql(dst, "update events set payload = '{}' where id in (7, 19999)")
# The cluster's figures of a changed table, for the driver's and local Spark's.
cond = "id % 5 <> 1"
(changed,) = compare_tables(spark, src, dst, [CompareTask("events", "events", cond, cond)])
print(json.dumps({"rows": copied.rows, "match": [c.matches for c in compared],
                  "counts": [c.dst_rows for c in compared],
                  "changed": figures(changed)}), flush=True)
sys.exit(code)
"""


def figures(result) -> list:
    """What a compare found, in a form that crosses a process boundary as JSON."""
    return [
        result.src_rows,
        str(result.src_checksum),
        result.dst_rows,
        str(result.dst_checksum),
        [r.describe(result.pkey) for r in result.ranges],
    ]


@dataclass(frozen=True)
class Standalone:
    url: str  # spark://127.0.0.1:PORT
    ui: str  # the master's web UI (its JSON page lists applications and their cores)

    def apps(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as resp:
            return json.load(resp)["activeapps"]

    def cores_of(self, name: str) -> int:
        return sum(int(a["cores"]) for a in self.apps() if a["name"] == name)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[Standalone]:
    work = tmp_path_factory.mktemp("spark-standalone")
    env = spark_env(SPARK_LOG_DIR=str(work))
    # The executors inherit the worker's environment, not its options.
    worker_env = spark_env(SPARK_LOG_DIR=str(work), **short_lived_jvm_env(executors=True))
    spark_class = str(spark_home() / "bin" / "spark-class")
    procs = []
    try:
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(free_port()),
                    "--webui-port",
                    str(free_port()),
                ],
                env=env,
                stdout=(work / "master.log").open("w"),
                stderr=subprocess.STDOUT,
            )
        )
        # A port found free may be taken before the master binds it (Spark then moves to
        # the next one): the worker and the tests use the ports the master reports.
        url, ui = _master_ports(procs, work)
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "2",
                    "--memory",
                    "1536m",
                    "--work-dir",
                    str(work / "work"),
                    "--webui-port",
                    str(free_port()),
                    url,
                ],
                env=worker_env,
                stdout=(work / "worker.log").open("w"),
                stderr=subprocess.STDOUT,
            )
        )
        _wait_for_worker(ui, procs, work)
        yield Standalone(url, f"http://127.0.0.1:{ui}")
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _pythonpath() -> str:
    """The child finds this directory's helpers and the package the tests import."""
    here = str(Path(__file__).parent)
    return os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])


def _master_ports(procs: list[subprocess.Popen], work: Path) -> tuple[str, int]:
    """The master's URL and web UI port, as its log reports them once it is up."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        _fail_if_exited(procs, work)
        text = (work / "master.log").read_text()
        url = re.search(r"Starting Spark master at (spark://\S+)", text)
        ui = re.search(r"Successfully started service 'MasterUI' on port (\d+)", text)
        if url and ui:
            return url.group(1), int(ui.group(1))
        time.sleep(0.2)
    pytest.fail("Spark master did not start in time")


def _fail_if_exited(procs: list[subprocess.Popen], work: Path) -> None:
    for proc in procs:
        if proc.poll() is not None:
            logs = "".join(p.read_text()[-2000:] for p in work.glob("*.log"))
            pytest.fail(f"Spark standalone process exited early:\n{logs}")


def _wait_for_worker(ui_port: int, procs: list[subprocess.Popen], work: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        _fail_if_exited(procs, work)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
                if json.load(resp).get("aliveworkers", 0) >= 1:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail("Spark worker did not register with the master in time")


def test_copy_and_compare_on_standalone_cluster(standalone, both, spark, monkeypatch) -> None:
    """Copy and compare on the cluster; its compare figures equal the driver's and local
    Spark's."""
    src, dst = both
    for connstr in (src, dst):
        run_sql(
            connstr,
            "create table users (id int primary key, name text)",
            "create table events (id bigint primary key, user_id int, payload jsonb)",
        )
    run_sql(
        src,
        "insert into users select g, 'u' || g from generate_series(1, 2000) g",
        """insert into events select g, g % 2000, jsonb_build_object('n', g)
           from generate_series(1, 20000) g""",
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, standalone.url, src, dst],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": _pythonpath()},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    on_cluster = report.pop("changed")
    assert report == {
        "rows": {"events": 20000, "users": 2000},
        "match": [True, True],
        "counts": [20000, 2000],
    }
    task = [CompareTask("events", "events", "id % 5 <> 1", "id % 5 <> 1")]
    (on_driver,) = compare_tables(lambda: pytest.fail("Spark started"), src, dst, task)
    monkeypatch.setattr(compare, "LOCAL_PAGES", 0)
    (on_local_spark,) = compare_tables(spark, src, dst, task)
    assert figures(on_driver) == figures(on_local_spark) == on_cluster
    assert on_cluster[0] - on_cluster[2] == 0 and len(on_cluster[4]) == 2
    assert "public.events: ok" in proc.stdout.splitlines()
    assert fetch(dst, "select count(*) from events") == [(20000,)]


# --- a node's worker and its commands on one shared cluster --------------------------------

HOLDER = r"""
import sys, time
from pgferry.pipeline.spark import get_spark
get_spark(master=sys.argv[1], app_name="other-team", settings={"spark.executor.memory": "512m"})
print("holding", flush=True)
time.sleep(600)
"""


@contextmanager
def _ticking(dsn: str, queue: str = "replika") -> Iterator[None]:
    """A tick on the root every 0.3 s, as the ticker daemon would make them."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.3):
            with contextlib.suppress(psycopg.Error):
                run_sql(dsn, f"select ferry_queue.force_tick('{queue}')")
                run_sql(dsn, f"select ferry_queue.ticker('{queue}')")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.mark.slow
@pytest.mark.timing
def test_worker_gives_cores_back_to_compare(standalone, db_a, db_b, write_ini, cli, tmp_path):
    """The leaf's copy and large batches run on the cluster; its idle session then goes, so
    compare gets the cores; with the cores held by someone else, compare fails in bounded
    time with one line naming the master and both applications."""
    # Two rows a page (fillfactor 10): ~1,500 pages from 3,000 rows, over copy's and
    # compare's LOCAL_PAGES, so both need Spark.
    table = "create table big (id int primary key, pad text) with (fillfactor = 10)"
    for dsn in (db_a, db_b):
        run_sql(dsn, table)
    run_sql(db_a, "insert into big select g, repeat('x', 300) from generate_series(1, 3000) g")
    assert fetch(db_a, "select pg_relation_size('big') / 8192 > 1000") == [(True,)]
    root_ini = write_ini("src", db_a)
    leaf_ini = write_ini(
        "leaf",
        db_b,
        loop_delay="0.1",
        exception_sleep="1",
        spark_master=standalone.url,
        spark_master_ui=standalone.ui,
        spark_idle_timeout="8",
        spark_wait="120",
        replay_local_events="20",
        **{"spark.executor.memory": "512m"},
    )
    assert cli(root_ini, "create-root", "src").code == 0
    assert cli(leaf_ini, "create-leaf", "leaf", f"--provider={db_a}").code == 0
    assert cli(root_ini, "add-table", "big").code == 0
    assert cli(leaf_ini, "add-table", "big").code == 0
    log = tmp_path / "log" / "leaf.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "pgferry", "-v", str(leaf_ini), "worker"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    holder = comparing = refusing = None
    try:
        with _ticking(db_a):
            wait_until(
                lambda: fetch(db_b, "select merge_state from ferry.table_info") == [("ok",)],
                timeout=240,
                what="the copy on the cluster",
            )
            # The session that copied is still up: a large batch is read on the cluster.
            assert standalone.cores_of("pgferry-leaf") == 2
            run_sql(db_a, "update big set pad = 'changed' where id % 50 = 0")
            wait_until(
                lambda: fetch(db_b, "select count(*) from big where pad = 'changed'") == [(60,)],
                timeout=120,
                what="the batch replayed",
            )
            assert "(spark)" in log.read_text()

            # compare's application waits until the worker's idle session is gone.
            started = time.monotonic()
            comparing = subprocess.Popen(
                [sys.executable, "-m", "pgferry", str(leaf_ini), "compare"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            # Once compare's application is at the master, the other application starts its
            # JVM meanwhile: the master serves applications in the order they came, so it
            # queues for the cores compare gives back.
            wait_until(
                lambda: (
                    comparing.poll() is not None
                    or any(a["name"] == "pgferry-leaf-sync" for a in standalone.apps())
                ),
                timeout=240,
                what="compare at the master",
            )
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, standalone.url],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            out, err = comparing.communicate(timeout=300)
            assert comparing.returncode == 0, err
            assert "public.big: Results do not match!" not in out
            assert "Spark unused for 8 s: stopping it" in log.read_text()
            assert time.monotonic() - started < 120

            # Cores held by another application: one line after spark_wait seconds.  Once the
            # holder is at the master (ahead of compare's new application), compare's JVM
            # starts while the holder takes the cores.
            wait_until(
                lambda: any(a["name"] == "other-team" for a in standalone.apps()),
                timeout=120,
                what="the holder at the master",
            )
            refusing = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pgferry",
                    str(leaf_ini),
                    "compare",
                    "--set",
                    "spark_wait=1",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
            wait_until(lambda: standalone.cores_of("other-team") == 2, timeout=60, what="holder")
            _, refused_err = refusing.communicate(timeout=300)
        lines = refused_err.strip().splitlines()
        assert refusing.returncode == 1 and "Traceback" not in refused_err, refused_err
        assert lines[-1].startswith(
            f"pgferry: Spark master {standalone.url} gave application pgferry-leaf-sync (app-"
        ), lines
        assert "no executor in 1 s; cores held by other-team (app-" in lines[-1]
        assert standalone.cores_of("pgferry-leaf-sync") == 0  # it left the master's queue
    finally:
        for child in (comparing, refusing, holder):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
        worker.terminate()
        worker.wait(timeout=60)
    same = "select id, pad from big order by id"
    assert fetch(db_a, same) == fetch(db_b, same)
