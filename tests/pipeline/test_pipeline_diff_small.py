"""Diffs on the driver (small tables anywhere, any table in local mode): no PySpark imported,
the same result as the Spark path."""

from __future__ import annotations

import subprocess
import sys

from pipeline_sql import run_sql

from pgferry.pipeline import keyranges
from pgferry.sync import compare, repair, repair_local
from pgferry.sync.compare import CompareTask, compare_tables, driver_threads
from pgferry.sync.keydiff import key_differences
from pgferry.sync.repair import repair_tables

DDL = """create table "Odd t" (id int, k text, "Name" text, price numeric, at timestamptz,
         b bytea, primary key (id, k))"""
FILL = """insert into "Odd t" select g, 'k' || (g % 3), 'n' || g, g / 3.0,
          '2026-01-01'::timestamptz + g * interval '1 h', decode(md5(g::text), 'hex')
          from generate_series(1, 3000) g"""
CHANGES = (
    """delete from "Odd t" where id in (5, 2000)""",
    """update "Odd t" set "Name" = null where id = 77""",
    """update "Odd t" set b = '\\x00', at = at + interval '1 s' where id = 1500""",
    """insert into "Odd t" values (9999, 'x', 'extra, "quoted"', null, null, null)""",
)
# Modules whose import means a JVM or Arrow on the driver.
HEAVY = ("pyspark", "py4j", "pyarrow")


def _tables(src: str, dst: str) -> None:
    for connstr in (src, dst):
        run_sql(connstr, DDL, FILL, "analyze")
    run_sql(dst, *CHANGES)


def _counting(spark, started: list[str], what: str):
    def session():
        started.append(what)
        return spark

    return session


def test_small_diff_imports_no_spark_and_matches_spark_path(
    spark, both, tmp_path, monkeypatch
) -> None:
    src, dst = both
    _tables(src, dst)
    fix = tmp_path / "driver.sql"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pgferry", "diff"]
        + [src, '"Odd t"', dst, 'public."Odd t"', "--repair", str(fix)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "pgferry.sync.repair" in imported  # the check sees the repair path's imports
    assert not [m for m in imported if m.split(".")[0] in HEAVY]
    assert "missed 2 inserts, 2 updates, 1 deletes (written to" in proc.stdout

    # The same tables through Spark: compare, then repair of the ranges it found.
    monkeypatch.setattr(compare, "LOCAL_PAGES", -1)
    monkeypatch.setattr(repair_local, "LOCAL_ROWS", -1)
    started: list[str] = []
    task = CompareTask('"Odd t"', 'public."Odd t"')
    (result,) = compare_tables(_counting(spark, started, "compare"), src, dst, [task])
    cli = proc.stdout.splitlines()
    assert cli[:2] == result.lines()[:2]  # rows and checksums
    # The keys the driver path printed, found again by the Spark path (rows alike).
    keys = key_differences(_counting(spark, started, "keys"), src, dst, task, result.ranges, 10)
    assert cli[3:-1] == keys.lines()
    (fixed,) = repair_tables(
        _counting(spark, started, "repair"),
        src,
        dst,
        [task],
        fix_dir=tmp_path,
        fix_file=tmp_path / "spark.sql",
        apply=False,
        ranges={task.dest_table: result.ranges},
    )
    assert started == ["compare", "keys", "repair"]
    assert fixed.changes == 5
    assert (tmp_path / "spark.sql").read_text() == fix.read_text()


def test_few_rows_in_ranges_of_a_large_table_repair_on_the_driver(
    spark, both, tmp_path, monkeypatch
) -> None:
    src, dst = both
    _tables(src, dst)
    monkeypatch.setattr(keyranges, "BUCKET_ROWS", 50)  # many buckets, few of them differ
    monkeypatch.setattr(compare, "LOCAL_PAGES", 0)  # as if large
    started: list[str] = []
    tasks = [CompareTask('"Odd t"', '"Odd t"', "id <> 3", "id <> 3")]
    # With a cluster configured (threads 0) a large table's sums are a Spark job.
    (result,) = compare_tables(_counting(spark, started, "compare"), src, dst, tasks)
    assert started == ["compare"] and len(result.ranges) >= 3
    # In local mode the driver's threads run the same sums, whatever the size: no Spark.
    (threaded,) = compare_tables(_counting(spark, started, "x"), src, dst, tasks, threads=2)
    assert started == ["compare"]
    for field in ("src_rows", "src_checksum", "dst_rows", "dst_checksum", "ranges"):
        assert getattr(threaded, field) == getattr(result, field), field
    fixes = {}
    # The driver's join (cluster), Spark's (cluster, over LOCAL_ROWS), the driver's in local
    # mode over LOCAL_ROWS, Spark's in local mode over LOCAL_MODE_ROWS.
    for rows, local_rows, threads in (
        (repair_local.LOCAL_ROWS, repair_local.LOCAL_MODE_ROWS, 0),
        (-1, repair_local.LOCAL_MODE_ROWS, 0),
        (-1, repair_local.LOCAL_MODE_ROWS, 2),
        (-1, -1, 2),
    ):
        monkeypatch.setattr(repair_local, "LOCAL_ROWS", rows)
        monkeypatch.setattr(repair_local, "LOCAL_MODE_ROWS", local_rows)
        (fixed,) = repair_tables(
            _counting(spark, started, f"repair {rows} {local_rows} {threads}"),
            src,
            dst,
            tasks,
            fix_dir=tmp_path,
            apply=False,
            ranges={tasks[0].dest_table: result.ranges},
            threads=threads,
        )
        assert (fixed.inserts, fixed.updates, fixed.deletes) == (2, 2, 1)
        fixes[rows, local_rows, threads] = fixed.sql_path.read_text()
    # The driver's joins started no Spark.
    assert started == ["compare", "repair -1 2000000 0", "repair -1 -1 2"]
    assert len(set(fixes.values())) == 1


def test_whole_table_repair_in_local_mode_reads_on_the_driver(
    spark, both, tmp_path, monkeypatch
) -> None:
    """A large table read whole (node repair) in local mode: on the driver, one wide range
    per query, the same fix as Spark's join."""
    src, dst = both
    _tables(src, dst)
    monkeypatch.setattr(repair, "READ_GROUP_BUCKETS", 1)  # 6 ranges of ~500 rows
    monkeypatch.setattr(compare, "LOCAL_PAGES", 0)  # as if large
    monkeypatch.setattr(repair_local, "LOCAL_ROWS", -1)
    queries: list[int] = []  # ranges per query, both sides
    sums = repair_local._group_sums
    monkeypatch.setattr(
        repair_local,
        "_group_sums",
        lambda c, p, side, r: queries.append(len(r)) or sums(c, p, side, r),
    )
    started: list[str] = []
    tasks = [CompareTask('"Odd t"', '"Odd t"')]
    fixes = []
    for threads in (2, 0):  # local mode, then a cluster
        (fixed,) = repair_tables(
            _counting(spark, started, f"repair {threads}"),
            src,
            dst,
            tasks,
            fix_dir=tmp_path,
            apply=False,
            threads=threads,
        )
        assert (fixed.inserts, fixed.updates, fixed.deletes) == (2, 2, 1)
        fixes.append(fixed.sql_path.read_text())
    assert started == ["repair 0"]
    assert len(queries) >= 10 and set(queries) == {1}  # both sides, one range per query
    assert fixes[0] == fixes[1]


def test_large_diff_in_local_mode_starts_no_spark(both, tmp_path) -> None:
    """`pgferry diff --repair` of a table over LOCAL_PAGES on the default configuration:
    compare's sums and the key read in the command's threads, no PySpark imported."""
    src, dst = both
    for connstr in (src, dst):
        run_sql(
            connstr,
            "create table wide (id int primary key, v text)",
            "insert into wide select g, repeat('v', 300) from generate_series(1, 30000) g",
            "analyze wide",
        )
    run_sql(dst, "update wide set v = 'w' where id = 777", "delete from wide where id = 29999")
    fix = tmp_path / "fix.sql"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pgferry", "diff"]
        + [src, "wide", dst, "wide", "--repair", str(fix)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert not [m for m in imported if m.split(".")[0] in HEAVY]
    assert "Starting Spark" not in proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line[:2] in ("- ", "+ ", "! ")] == ["! id=777", "- id=29999"]
    assert lines[-1].endswith(f"missed 1 inserts, 1 updates, 0 deletes (written to {fix})")


def test_driver_threads_stand_in_for_local_mode_only() -> None:
    assert driver_threads({}) == driver_threads({"spark_master": "local[*]"}) >= 1
    assert driver_threads({"spark_master": "local"}) == 1
    assert driver_threads({"spark_master": "local[3]"}) == 3
    assert driver_threads({"spark_master": "local[2,4]"}) == 2
    assert driver_threads({"spark_master": "spark://host:7077"}) == 0
    assert driver_threads({"spark_remote": "sc://host:15002"}) == 0
