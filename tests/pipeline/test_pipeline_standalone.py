"""Copy, compare and `pgferry diff` on a real Spark standalone cluster (master + worker).

The cluster is started from the pyspark package on 127.0.0.1.  Spark allows one SparkContext
per process and this one already holds the shared local session, so the jobs run in a child
process whose session points at ``spark://127.0.0.1:PORT``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipeline_sql import fetch, run_sql

from pgferry.testing.cluster import free_port

pytestmark = pytest.mark.cluster

SCRIPT = r"""
import json, sys
from pgferry.cli.main import main
from pgferry.pipeline.compare import CompareTask, compare_tables
from pgferry.pipeline.copy import CopyTask, copy_tables
from pgferry.pipeline.spark import get_spark

master, src, dst = sys.argv[1:4]
spark = get_spark(master=master, app_name="pgferry-standalone-test",
                  settings={"spark.executor.memory": "512m", "spark.cores.max": "2"})
assert spark.sparkContext.master == master
copied = copy_tables(spark, src, dst, [CopyTask("events", "events"), CopyTask("users", "users")],
                     progress=False)
compared = compare_tables(spark, src, dst, [CompareTask("events", "events"),
                                            CompareTask("users", "users")])
print(json.dumps({"rows": copied.rows, "match": [c.matches for c in compared],
                  "counts": [c.dst_rows for c in compared]}), flush=True)
# The CLI in the same process reuses the session on the cluster.
sys.exit(main(["diff", src, "events", dst, "events", "--set", "spark_master=" + master]))
"""


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[str]:
    home = _spark_home()
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(work),
    }
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
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
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
                env=env,
                stdout=(work / "master.log").open("w"),
                stderr=subprocess.STDOUT,
            )
        )
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
                env=env,
                stdout=(work / "worker.log").open("w"),
                stderr=subprocess.STDOUT,
            )
        )
        _wait_for_worker(ui, procs, work)
        yield url
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for_worker(ui_port: int, procs: list[subprocess.Popen], work: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                logs = "".join(p.read_text()[-2000:] for p in work.glob("*.log"))
                pytest.fail(f"Spark standalone process exited early:\n{logs}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
                if json.load(resp).get("aliveworkers", 0) >= 1:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail("Spark worker did not register with the master in time")


def test_copy_and_compare_on_standalone_cluster(standalone, both) -> None:
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
        [sys.executable, "-c", SCRIPT, standalone, src, dst],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[0])
    assert report == {
        "rows": {"events": 20000, "users": 2000},
        "match": [True, True],
        "counts": [20000, 2000],
    }
    assert proc.stdout.splitlines()[-1] == "public.events: ok"
    assert fetch(dst, "select count(*) from events") == [(20000,)]
