"""Commands that need Spark and cannot have it: one line naming the master, a non-zero exit,
no traceback, no secret; commands that do not need it (a small compare or repair) still work."""

from __future__ import annotations

import subprocess

import psycopg

from pgferry.testing.cluster import free_port
from pgferry.testing.commands import run_pgferry

pgferry = run_pgferry


def sql(dsn: str, query: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(query)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_node_commands_and_diff(db_a, db_b, write_ini, cli, tmp_path) -> None:
    for dsn in (db_a, db_b):
        sql(dsn, "create table t (id int primary key, v text)")
        sql(dsn, "insert into t select g, 'v' from generate_series(1, 50) g")
        # Over compare's LOCAL_PAGES (1,000 pages): only Spark compares or repairs it.
        sql(dsn, "create table big (id int primary key, v text)")
        sql(dsn, "insert into big select g, repeat('v', 300) from generate_series(1, 30000) g")
    root_ini = write_ini("src", db_a)
    leaf_ini = write_ini("dst", db_b)
    assert cli(root_ini, "create-root", "src").code == 0
    assert cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0
    for table in ("t", "big"):
        assert cli(root_ini, "add-table", table).code == 0
        assert cli(leaf_ini, "add-table", table, "--expect-sync").code == 0
    bad = f"spark://127.0.0.1:{free_port()}"
    reason = f"Spark master {bad} cannot be reached: Connection refused"

    repair = pgferry(leaf_ini, "repair", "big", "--set", f"spark_master={bad}", "--dir", tmp_path)
    assert _one_line(repair) == f"pgferry: {reason}"

    connect = pgferry(
        leaf_ini, "repair", "big", "--set", "spark_remote=sc://spark.example:15002/;token=hush"
    )
    line = _one_line(connect)
    assert line.startswith(
        "pgferry: Spark Connect server sc://spark.example:15002/;token=[...] cannot be reached: "
    )
    assert "hush" not in connect.stderr

    # diff: a small table is compared and repaired on the driver, without the master.
    sql(db_a, "update t set v = 'changed' where id = 7")
    fix = tmp_path / "fix.sql"
    diff = pgferry("diff", db_a, "t", db_b, "t", "--repair", fix, "--set", f"spark_master={bad}")
    assert diff.returncode == 1, diff.stderr
    assert diff.stdout.strip().endswith("missed 0 inserts, 1 updates, 0 deletes (written to "
                                        f"{fix})")  # fmt: skip
    assert "'changed'" in fix.read_text()
    # A large one needs Spark for its compare already.
    diff = pgferry("diff", db_a, "big", db_b, "big", "--set", f"spark_master={bad}")
    assert _one_line(diff) == f"pgferry: {reason}"
