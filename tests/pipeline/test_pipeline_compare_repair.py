"""Compare (equal, differing, conditions, caller snapshots) and repair (+apply)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from pipeline_sql import fetch, run_sql

from pgferry.errors import TableError
from pgferry.pipeline import keyranges
from pgferry.pipeline.snapshot import exported_snapshot
from pgferry.sync.compare import CompareTask, TableComparison, compare_tables
from pgferry.sync.repair import RepairResult, repair_tables

ODD = 'create table {t} (id int primary key, "Name" text, price numeric, at timestamptz, b bytea)'
FILL = """insert into {t} select g, 'n' || g, g / 3.0,
          '2026-01-01'::timestamptz + g * interval '1 h', decode(md5(g::text), 'hex')
          from generate_series(1, {n}) g"""


def _twins(src: str, dst: str, n: int = 5000, table: str = "items") -> None:
    for connstr in (src, dst):
        run_sql(connstr, ODD.format(t=table), FILL.format(t=table, n=n), "analyze")


@pytest.fixture(autouse=True)
def small_buckets(monkeypatch):
    # Small test tables still get many buckets, as big ones do.
    monkeypatch.setattr(keyranges, "BUCKET_ROWS", 50)


def test_equal_tables_match(spark, both) -> None:
    src, dst = both
    _twins(src, dst)
    # Session settings on the destination must not change the text the checksum sees.
    run_sql(dst, "alter database " + dst.split("dbname=")[1] + " set timezone = 'Asia/Tokyo'")
    (result,) = compare_tables(spark, src, dst, [CompareTask("items", "public.items")])
    assert result.matches
    assert result.src_rows == result.dst_rows == 5000
    assert result.lines()[0] == f"srcdb: 5000 rows, checksum={result.src_checksum}"
    assert result.lines()[-1] == "public.items: ok"


def test_differences_are_located_and_repaired(spark, both, tmp_path) -> None:
    src, dst = both
    _twins(src, dst)
    run_sql(
        dst,
        "delete from items where id in (17, 2500)",
        'update items set "Name" = null where id = 3000',
        "update items set price = price + 1 where id = 4999",
        "insert into items values (9000, 'it''s \"odd\"', null, null, '\\x00ff')",
    )
    run_sql(src, "update items set \"Name\" = E'tab\\there, ünï' where id = 1")
    (result,) = compare_tables(spark, src, dst, [CompareTask("items", "items")])
    assert not result.matches
    assert (result.src_rows, result.dst_rows) == (5000, 4999)
    assert "items: Results do not match!" in result.lines()
    # Only small ranges around the changed keys are reported.
    ids = [r[0] for r in fetch(src, "select id from items")] + [9000]
    inside = {
        i
        for i in ids
        for rng in result.ranges
        if (rng.lower is None or i >= int(rng.lower[0]))
        and (rng.upper is None or i < int(rng.upper[0]))
    }
    assert {1, 17, 2500, 3000, 4999, 9000} <= inside
    assert len(inside) < 1500

    # Without apply: the fix is only written.
    (dry,) = repair_tables(
        spark,
        src,
        dst,
        [CompareTask("items", "items")],
        fix_dir=tmp_path,
        apply=False,
        ranges={"items": result.ranges},
    )
    assert (dry.inserts, dry.updates, dry.deletes) == (2, 3, 1)
    text = dry.sql_path.read_text()
    assert 'delete from only "public"."items" where "id" = \'9000\';' in text
    assert fetch(dst, "select count(*) from items") == [(4999,)]
    # The written file is valid SQL that fixes the table by itself.
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute(text.encode())
    (again,) = compare_tables(spark, src, dst, [CompareTask("items", "items")])
    assert again.matches


def test_repair_apply_without_ranges(spark, both, tmp_path) -> None:
    src, dst = both
    _twins(src, dst, n=800)
    run_sql(dst, "truncate items")
    (fixed,) = repair_tables(
        spark, src, dst, [CompareTask("items", "items")], fix_dir=tmp_path, apply=True
    )
    assert fixed.applied and fixed.inserts == 800
    (after,) = compare_tables(spark, src, dst, [CompareTask("items", "items")])
    assert after.matches and after.dst_rows == 800


def test_condition_on_source_and_composite_key(spark, both, tmp_path) -> None:
    src, dst = both
    ddl = 'create table "Pair" (k text, n int, v text, primary key (k, n))'
    run_sql(
        src,
        ddl,
        "insert into \"Pair\" select 'k' || (g % 7), g, 'v' from generate_series(1, 2000) g",
    )
    run_sql(
        dst,
        ddl,
        "insert into \"Pair\" select 'k' || (g % 7), g, 'v' from generate_series(1, 2000) g"
        " where g % 2 = 0",
    )
    task = CompareTask('"Pair"', '"Pair"', copy_condition="n % 2 = 0")
    (result,) = compare_tables(spark, src, dst, [task])
    assert result.matches and result.src_rows == 1000
    run_sql(
        dst,
        "update \"Pair\" set v = 'w' where k = 'k3' and n = 10",
        'delete from "Pair" where n = 1000',
    )
    (result,) = compare_tables(spark, src, dst, [task])
    assert not result.matches and "  differs: (k, n) " in "\n".join(result.lines())
    (fixed,) = repair_tables(
        spark, src, dst, [task], fix_dir=tmp_path, apply=True, ranges={'"Pair"': result.ranges}
    )
    assert (fixed.inserts, fixed.updates, fixed.deletes) == (1, 1, 0)
    assert compare_tables(spark, src, dst, [task])[0].matches


def test_caller_snapshots_pin_the_point_in_time(spark, both) -> None:
    src, dst = both
    _twins(src, dst, n=300)
    with exported_snapshot(src) as s, exported_snapshot(dst) as d:
        # Changes after the snapshots are invisible to the comparison.
        run_sql(dst, "delete from items where id = 5")
        (pinned,) = compare_tables(
            spark,
            src,
            dst,
            [CompareTask("items", "items")],
            src_snapshot=s.snapshot_id,
            dst_snapshot=d.snapshot_id,
        )
    assert pinned.matches
    (now,) = compare_tables(spark, src, dst, [CompareTask("items", "items")])
    assert not now.matches


def test_table_without_primary_key_is_refused(spark, both) -> None:
    src, dst = both
    for connstr in (src, dst):
        run_sql(connstr, "create table nokey (a int)")
    with pytest.raises(TableError, match="has no primary key"):
        compare_tables(spark, src, dst, [CompareTask("nokey", "nokey")])


class IndependentSnapshots:
    """A sync point where each side exports a snapshot of its own current state.

    The replication worker's sync point (``pgferry.sync.point``) holds a pair of snapshots
    taken at one tick instead; compare and repair only see the two snapshot ids.
    """

    def __init__(self, src_connstr: str, dst_connstr: str) -> None:
        self.src_connstr = src_connstr
        self.dst_connstr = dst_connstr

    @contextmanager
    def hold(self, tables: Sequence[CompareTask]) -> Iterator[tuple[str, str]]:
        with (
            exported_snapshot(self.src_connstr) as src,
            exported_snapshot(self.dst_connstr) as dst,
        ):
            yield src.snapshot_id, dst.snapshot_id


def compare_at(
    spark, sync: IndependentSnapshots, src: str, dst: str, tasks: list[CompareTask]
) -> list[TableComparison]:
    with sync.hold(tasks) as (src_snap, dst_snap):
        return compare_tables(spark, src, dst, tasks, src_snapshot=src_snap, dst_snapshot=dst_snap)


def repair_at(
    spark,
    sync: IndependentSnapshots,
    src: str,
    dst: str,
    tasks: list[CompareTask],
    *,
    fix_dir: Path,
    apply: bool,
    comparisons: Sequence[TableComparison],
) -> list[RepairResult]:
    """Repair at one sync point, reading only the ranges where ``comparisons`` differ."""
    ranges = {c.dest_table: c.ranges for c in comparisons}
    with sync.hold(tasks) as (src_snap, dst_snap):
        return repair_tables(
            spark, src, dst, tasks, fix_dir=fix_dir, apply=apply,
            src_snapshot=src_snap, dst_snapshot=dst_snap, ranges=ranges,
        )  # fmt: skip


def test_sync_point_interface(spark, both, tmp_path) -> None:
    src, dst = both
    _twins(src, dst, n=400)
    run_sql(dst, "update items set price = 0 where id = 200")
    sync = IndependentSnapshots(src, dst)
    tasks = [CompareTask("items", "items")]
    (found,) = compare_at(spark, sync, src, dst, tasks)
    assert not found.matches
    (fixed,) = repair_at(spark, sync, src, dst, tasks, fix_dir=tmp_path, apply=True,
                         comparisons=[found])  # fmt: skip
    assert fixed.updates == 1 and compare_at(spark, sync, src, dst, tasks)[0].matches


def test_text_checksum_for_unhashable_or_differing_types(spark, both) -> None:
    src, dst = both
    # json has no hash function; int vs bigint keys differ in type: both fall back to text.
    run_sql(src, "create table docs (id int primary key, doc json, p point)",
            """insert into docs select g, json_build_object('g', g), point(g, g)
               from generate_series(1, 300) g""")  # fmt: skip
    run_sql(dst, "create table docs (id bigint primary key, doc json, p point)",
            """insert into docs select g, json_build_object('g', g), point(g, g)
               from generate_series(1, 300) g""")  # fmt: skip
    (same,) = compare_tables(spark, src, dst, [CompareTask("docs", "docs")])
    assert same.matches and same.src_rows == 300
    run_sql(dst, """update docs set doc = '{"g": 7}' where id = 8""")
    (differs,) = compare_tables(spark, src, dst, [CompareTask("docs", "docs")])
    assert not differs.matches and differs.src_rows == differs.dst_rows


def test_partitioned_tables_copy_compare_repair(spark, both, tmp_path) -> None:
    from pgferry.pipeline.copy import CopyTask, copy_tables

    src, dst = both
    for connstr in (src, dst):
        run_sql(
            connstr,
            "create table parts (id int primary key, v text) partition by range (id)",
            "create table parts_lo partition of parts for values from (0) to (500)",
            "create table parts_hi partition of parts for values from (500) to (1000)",
        )
    run_sql(src, "insert into parts select g, 'v' || g from generate_series(0, 999) g")
    result = copy_tables(spark, src, dst, [CopyTask("parts", "parts", "id % 3 <> 0")])
    assert result.rows == {"parts": 666}
    task = CompareTask("parts", "parts", copy_condition="id % 3 <> 0")
    assert compare_tables(spark, src, dst, [task])[0].matches
    run_sql(dst, "update parts set v = 'x' where id = 700", "delete from parts where id = 1")
    (found,) = compare_tables(spark, src, dst, [task])
    (fixed,) = repair_tables(spark, src, dst, [task], fix_dir=tmp_path, apply=True,
                             ranges={"parts": found.ranges})  # fmt: skip
    assert (fixed.inserts, fixed.updates, fixed.deletes) == (1, 1, 0)
    assert compare_tables(spark, src, dst, [task])[0].matches


def test_driver_and_spark_paths_agree(spark, both, monkeypatch) -> None:
    """Small tables are summed on the driver, large ones by Spark tasks: same figures."""
    from pgferry.sync import compare

    src, dst = both
    _twins(src, dst, n=3000, table="pathy")
    run_sql(dst, "delete from pathy where id in (5, 2000)")
    run_sql(dst, "update pathy set price = 0 where id = 77")
    task = [CompareTask("pathy", "pathy", "id % 7 <> 3", "id % 7 <> 3")]
    started: list[bool] = []

    def session():
        started.append(True)
        return spark

    (local,) = compare_tables(session, src, dst, task)
    assert started == []  # no Spark for a small table
    monkeypatch.setattr(compare, "LOCAL_PAGES", 0)
    (remote,) = compare_tables(session, src, dst, task)
    assert started == [True]
    for field in ("src_rows", "src_checksum", "dst_rows", "dst_checksum", "ranges"):
        assert getattr(local, field) == getattr(remote, field), field
    assert not local.matches and local.src_rows - local.dst_rows == 2
