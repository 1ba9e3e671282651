"""Compare, repair and diff on a Spark Connect server: the same results as the driver and a
classic session, no JVM in the command, and a server that cannot be used is one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pipeline_sql import run_sql
from test_pipeline_diff_small import CHANGES, DDL, FILL

from pgferry.errors import SparkUnavailable
from pgferry.pipeline.spark import get_spark
from pgferry.pipeline.spark_connect import is_connect_session
from pgferry.sync import compare, repair_local
from pgferry.sync.compare import CompareTask, compare_tables
from pgferry.sync.repair import repair_tables
from pgferry.testing.cluster import free_port


def _tables(src: str, dst: str) -> None:
    for connstr in (src, dst):
        run_sql(connstr, DDL, FILL, "analyze")
    run_sql(dst, *CHANGES)


def _compare_and_repair(session, src, dst, task, tmp_path, name):
    (result,) = compare_tables(session, src, dst, [task])
    (fixed,) = repair_tables(
        session,
        src,
        dst,
        [task],
        fix_dir=tmp_path,
        fix_file=tmp_path / f"{name}.sql",
        apply=False,
        ranges={task.dest_table: result.ranges},
    )
    return result, fixed


def test_connect_gives_the_driver_and_classic_results(
    connect_server, spark, both, tmp_path, monkeypatch
) -> None:
    src, dst = both
    _tables(src, dst)
    task = CompareTask('"Odd t"', 'public."Odd t"', "id <> 3", "id <> 3")
    found = {}
    # The driver: small tables are summed and joined without Spark.
    found["driver"] = _compare_and_repair(None, src, dst, task, tmp_path, "driver")
    monkeypatch.setattr(compare, "LOCAL_PAGES", -1)
    monkeypatch.setattr(repair_local, "LOCAL_ROWS", -1)
    remote = get_spark(master=connect_server.url, remote_ok=True)
    assert is_connect_session(remote) and not is_connect_session(spark)
    found["connect"] = _compare_and_repair(remote, src, dst, task, tmp_path, "connect")
    found["classic"] = _compare_and_repair(spark, src, dst, task, tmp_path, "classic")
    for result, fixed in found.values():
        assert result.lines() == found["driver"][0].lines()
        assert (fixed.inserts, fixed.updates, fixed.deletes) == (2, 2, 1)
    assert len({fixed.sql_path.read_text() for _, fixed in found.values()}) == 1
    # The classic session of this process was not touched by the client.
    assert spark.range(3).count() == 3


def test_diff_command_on_connect_starts_no_jvm(connect_server, both, tmp_path) -> None:
    src, dst = both
    # Over LOCAL_PAGES (1,000 pages): the command's compare and repair need Spark.
    big = "create table big (id int primary key, v text)"
    fill = "insert into big select g, repeat(md5(g::text), 6) from generate_series(1, 60000) g"
    run_sql(src, big, fill, "analyze")
    run_sql(dst, big, fill, "update big set v = 'x' where id in (5, 29000)", "analyze")
    fix = tmp_path / "fix.sql"
    # Without a Spark home a JVM could not start: the command must not need one.
    env = {**os.environ, "SPARK_HOME": str(tmp_path / "no-spark-here")}
    proc = subprocess.run(
        [sys.executable, "-m", "pgferry", "diff", src, "big", dst, "big", "--repair", fix,
         "--set", f"spark_remote={connect_server.url}", "--set", "spark.ui.enabled=false"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "missed 0 inserts, 2 updates, 0 deletes" in proc.stdout
    assert fix.read_text().count("update only") == 2
    # A setting of the server's own start is named, not silently dropped.
    assert "spark.ui.enabled not set" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "url, expect",
    [
        ("sc://127.0.0.1:{port}/;token=hush", "cannot be reached: Connection refused"),
        ("sc:/127.0.0.1;token=hush", "is not sc://host[:port]"),
    ],
)
def test_unusable_connect_server_is_one_line(url, expect) -> None:
    url = url.format(port=free_port())
    with pytest.raises(SparkUnavailable) as caught:
        get_spark(master=url, remote_ok=True)
    message = str(caught.value)
    assert message.startswith("Spark Connect") and expect in message
    assert "hush" not in message and "[...]" in message and "\n" not in message


def test_worker_options_leave_spark_remote_to_the_commands() -> None:
    from pgferry.pipeline.spark import SparkOptions

    values = {"spark_remote": "sc://h:15002", "spark_master": "local[2]"}
    assert SparkOptions.from_values(values, "w").master == "local[2]"
    assert SparkOptions.from_values(values, "c", remote_ok=True).master == "sc://h:15002"
