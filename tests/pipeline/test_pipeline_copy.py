"""Initial copy: one snapshot for all tables, conditions, renames, odd names, retried tasks;
the tests marked with the ``path`` fixture run both on the driver and through Spark."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from pipeline_sql import fetch, one, run_sql

import pgferry.pipeline.copy as copy_pkg
from pgferry.errors import TableError
from pgferry.pipeline.copy import CopyTask, block_ranges, copy_tables, task_groups
from pgferry.pipeline.copy import plan as copy_plan
from pgferry.pipeline.copy.task import BlockRange, CopyJob, connections, copy_block_range


def _pair_tables(connstr: str, rows: int = 0) -> None:
    run_sql(
        connstr,
        "create table pay (id int primary key, amount numeric not null, note text)",
        "create table ledger (id int primary key, pay_id int not null, total numeric)",
    )
    if rows:
        run_sql(
            connstr,
            f"insert into pay select g, g % 97, repeat('x', 40) from generate_series(1, {rows}) g",
            f"insert into ledger select g, g, g % 97 from generate_series(1, {rows}) g",
            "analyze",
        )


@pytest.fixture(params=["driver", "spark"])
def path(request, monkeypatch, spark):
    """Which way ``copy_tables`` copies (threads of the driver, or Spark tasks) and a
    function giving it the session that records whether Spark was asked for."""
    monkeypatch.setattr(copy_pkg, "LOCAL_PAGES", 10**9 if request.param == "driver" else -1)
    asked: list[bool] = []

    def session():
        asked.append(True)
        return spark

    yield session
    assert asked == ([True] if request.param == "spark" else [])


def test_block_ranges_cover_everything() -> None:
    assert block_ranges(10) == [(None, None)]
    ranges = block_ranges(20_000, parallelism=2)
    assert ranges[0][0] is None and ranges[-1][1] is None
    for (_, hi), (lo, _) in zip(ranges, ranges[1:], strict=False):
        assert hi == lo


def test_task_groups_one_task_per_slot_balanced_by_size() -> None:
    units = [
        BlockRange(plan_no, range_no, None, None, blocks)
        for plan_no, range_no, blocks in (
            (0, 0, 1850), (0, 1, 1850), (1, 0, 760), (1, 1, 760),
            (2, 0, 760), (2, 1, 760), (3, 0, 540), (3, 1, 540), (4, 0, 1),
        )
    ]  # fmt: skip
    groups = task_groups(units, slots=2, max_parallel=16)
    assert len(groups) == 2
    assert sorted(id(u) for g in groups for u in g) == sorted(map(id, units))  # each once
    loads = [sum(u.blocks for u in g) for g in groups]
    assert max(loads) - min(loads) <= 540
    for group in groups:  # biggest ranges first within a task
        assert [u.blocks for u in group] == sorted((u.blocks for u in group), reverse=True)
    assert len(task_groups(units, slots=8, max_parallel=3)) == 3  # parallel_copies limits
    assert len(task_groups(units[:1], slots=8, max_parallel=None)) == 1
    assert [len(g) for g in task_groups(units, slots=0, max_parallel=None)] == [9]


def test_copy_tables_share_one_snapshot_under_concurrent_writes(path, both, monkeypatch) -> None:
    src, dst = both
    _pair_tables(src, rows=60_000)
    _pair_tables(dst)
    # Small ranges: many tasks, so the writer gets to commit between them.
    monkeypatch.setattr(copy_plan, "MIN_SPLIT_BLOCKS", 8)
    monkeypatch.setattr(copy_plan, "RANGE_BLOCKS", 64)
    stop = threading.Event()
    written = [0]

    def writer() -> None:
        import psycopg

        with psycopg.connect(src, autocommit=True) as conn:
            next_id = 100_000
            while not stop.is_set():
                # One transaction touches both tables: a consistent copy has both or neither.
                with conn.transaction():
                    conn.execute("insert into pay values (%s, 1, 'live')", (next_id,))
                    conn.execute("insert into ledger values (%s, %s, 1)", (next_id, next_id))
                next_id += 1
                written[0] += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while written[0] < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        result = copy_tables(
            path, src, dst, [CopyTask("public.pay", "public.pay"), CopyTask("ledger", "ledger")]
        )
        before_end = written[0]
    finally:
        stop.set()
        thread.join()
    assert before_end > 20
    pay_ids = {r[0] for r in fetch(dst, "select id from pay")}
    ledger_ids = {r[0] for r in fetch(dst, "select id from ledger")}
    assert pay_ids == ledger_ids
    # Exactly the rows visible in the returned snapshot, for both tables.
    visible = "where pg_visible_in_snapshot(xmin::text::xid8, %s::pg_snapshot)"
    expect_pay = fetch(
        src, f"select id, amount, note from pay {visible} order by id", (result.snapshot,)
    )
    assert fetch(dst, "select id, amount, note from pay order by id") == expect_pay
    assert result.rows == {"public.pay": len(expect_pay), "ledger": len(ledger_ids)}
    assert len(expect_pay) < one(src, "select count(*) from pay")
    # No bookkeeping is left behind; the table was analyzed.
    assert one(dst, "select count(*) from ferry_copy.range_done") == 0
    assert one(dst, "select reltuples from pg_class where relname = 'pay'") > 0


def test_copy_condition_rename_and_unicode_names(path, both) -> None:
    src, dst = both
    run_sql(
        src,
        'create schema "Mixed Case"',
        'create table "Mixed Case"."Tåble Ω" ("Key" int primary key, "Col A" text, "ünï" int)',
        """insert into "Mixed Case"."Tåble Ω"
           select g, 'v' || g, g * 2 from generate_series(1, 1000) g""",
    )
    run_sql(
        dst,
        'create schema "other place"',
        # Different column order and an extra column with a default: copy goes by name.
        """create table "other place"."Ren amed" ("ünï" int, extra text default 'd',
               "Col A" text, "Key" int primary key)""",
        'create index "by col" on "other place"."Ren amed" ("Col A")',
        """insert into "other place"."Ren amed" values (1, 'old', 'old', -1)""",
    )
    task = CopyTask('"Mixed Case"."Tåble Ω"', '"other place"."Ren amed"', '"Key" % 10 = 0')
    result = copy_tables(path, src, dst, [task])
    assert result.rows == {'"other place"."Ren amed"': 100}
    rows = fetch(
        dst, 'select "Key", "Col A", "ünï", extra from "other place"."Ren amed" order by "Key"'
    )
    assert rows[0] == (10, "v10", 20, "d") and rows[-1] == (1000, "v1000", 2000, "d")
    assert len(rows) == 100
    # The secondary index was dropped for the load and rebuilt.
    assert fetch(
        dst, "select indexname from pg_indexes where tablename = 'Ren amed' order by 1"
    ) == [("Ren amed_pkey",), ("by col",)]


def test_skip_truncate_keeps_rows(spark, both) -> None:
    src, dst = both
    run_sql(src, "create table t (id int primary key)", "insert into t values (1), (2)")
    run_sql(dst, "create table t (id int primary key)", "insert into t values (7)")
    copy_tables(spark, src, dst, [CopyTask("t", "t", skip_truncate=True)])
    assert fetch(dst, "select id from t order by id") == [(1,), (2,), (7,)]
    copy_tables(spark, src, dst, [CopyTask("t", "t")])
    assert fetch(dst, "select id from t order by id") == [(1,), (2,)]


def _copy_group_failing_once(folder: Path, stage: str) -> Callable[[CopyJob, list], int]:
    """A Spark task body that fails the first attempt of every table's range 0 at ``stage``.

    ``mid`` fails inside the destination transaction (rows written, not committed); ``after``
    fails once the range is committed, before the task reports success.  Otherwise it copies
    like ``copy_group``, with the same connections and per-range function.

    It runs in Spark's Python workers, other processes than the test's: the function and its
    class are nested, so Spark pickles them by value (a module-level one would be pickled by
    name, and the workers cannot import the test modules).  Which attempt is the first is
    decided across processes by a marker file in ``folder``, created atomically by the
    attempt that fails.
    """

    class FailBeforeCommit:
        """The destination connection, whose transactions roll back instead of committing."""

        def __init__(self, conn: psycopg.Connection) -> None:
            self._conn = conn

        def __getattr__(self, name: str):
            return getattr(self._conn, name)

        @contextlib.contextmanager
        def transaction(self) -> Iterator[None]:
            with self._conn.transaction():
                yield
                raise RuntimeError(f"injected failure ({stage}) before commit")

    def first_attempt(dest_key: str, rng: BlockRange) -> bool:
        if rng.range_no != 0:
            return False
        try:
            (folder / f"{dest_key.replace('/', '_')}.{stage}").open("x").close()
        except FileExistsError:
            return False
        return True

    def copy_group(job: CopyJob, ranges: list[BlockRange]) -> int:
        rows = 0
        with connections(job) as (src, dst):
            for rng in ranges:
                dest_key = job.plans[rng.plan_no].dest_key
                if not first_attempt(dest_key, rng):
                    rows += copy_block_range(job, rng, src, dst)
                elif stage == "mid":
                    copy_block_range(job, rng, src, FailBeforeCommit(dst))  # type: ignore[arg-type]
                else:
                    copy_block_range(job, rng, src, dst)
                    raise RuntimeError(f"injected failure ({stage}) in {dest_key} range 0")
        return rows

    return copy_group


@pytest.mark.parametrize("stage", ["mid", "after"])
def test_retried_task_neither_duplicates_nor_loses(path, both, tmp_path, monkeypatch, stage):
    """Failed tasks are run again: a range whose first attempt failed is copied once.

    ``copy_tables`` maps the task groups through ``copy_group`` as named in
    ``pgferry.pipeline.copy``; the test puts a failing one there (see
    ``_copy_group_failing_once``), which Spark ships to the workers with the job.
    """
    src, dst = both
    _pair_tables(src, rows=20_000)
    _pair_tables(dst)
    monkeypatch.setattr(copy_plan, "MIN_SPLIT_BLOCKS", 8)
    monkeypatch.setattr(copy_plan, "RANGE_BLOCKS", 32)
    monkeypatch.setattr(copy_pkg, "copy_group", _copy_group_failing_once(tmp_path, stage))
    tasks = [CopyTask("pay", "pay"), CopyTask("ledger", "ledger")]
    result = copy_tables(path, src, dst, tasks)
    # The hook really fired (and the failed attempts were retried).
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"ledger.{stage}", f"pay.{stage}"]
    assert result.rows == {"pay": 20_000, "ledger": 20_000}
    for table in ("pay", "ledger"):
        assert fetch(dst, f"select count(*), count(distinct id), sum(id) from {table}") == [
            (20_000, 20_000, 20_000 * 20_001 // 2)
        ]


def test_unknown_tables_fail_cleanly(spark, both) -> None:
    src, dst = both
    run_sql(src, "create table t (id int primary key)")
    with pytest.raises(TableError, match="unknown table nope"):
        copy_tables(spark, src, dst, [CopyTask("t", "nope")])
    with pytest.raises(TableError, match="unknown table public.nope"):
        copy_tables(spark, src, dst, [CopyTask("public.nope", "t")])


def test_tables_linked_by_foreign_key_copy_together(spark, both) -> None:
    src, dst = both
    ddl = (
        "create table parent (id int primary key)",
        "create table child (id int primary key, parent_id int not null references parent)",
    )
    run_sql(src, *ddl, "insert into parent select generate_series(1, 50)",
            "insert into child select g, 1 + g % 50 from generate_series(1, 500) g")  # fmt: skip
    run_sql(dst, *ddl, "insert into parent values (99)", "insert into child values (1, 99)")
    result = copy_tables(
        spark, src, dst, [CopyTask("child", "child"), CopyTask("parent", "parent")]
    )
    assert result.rows == {"child": 500, "parent": 50}
    assert fetch(dst, "select count(*) from child c join parent p on p.id = c.parent_id") == [
        (500,)
    ]


_TYPES_DDL = """
create table typed (id int primary key, n numeric(12,3), f float8, t text, b bytea,
  ts timestamptz, d date, iv interval, ip inet, j jsonb, arr int[], tarr text[], u uuid,
  flag boolean, mood {mood})
"""
_TYPES_ROWS = """
insert into typed
select g, g / 7.0, g * 1.5e-3, E'tab\\there ' || g || E'\\nline Ω', decode(md5(g::text), 'hex'),
       timestamptz '2024-02-29 12:00+01' + g * interval '1 minute', date '1999-12-31' + g,
       g * interval '1 second', ('10.0.' || g % 256 || '.1')::inet,
       jsonb_build_object('k', g, 'a', jsonb_build_array(g, null)), array[g, null, -g],
       array['a' || g, null, E'q"\\\\'], md5(g::text)::uuid, g % 2 = 0,
       (case when g % 3 = 0 then null else 'ok' end)::mood
from generate_series(1, 3000) g
"""


def test_binary_copy_where_types_match_text_where_they_do_not(path, both) -> None:
    src, dst = both
    for connstr in (src, dst):
        run_sql(connstr, "create type mood as enum ('ok', 'sad')")
    run_sql(src, _TYPES_DDL.format(mood="mood"), _TYPES_ROWS)
    run_sql(src, "create table plain as select * from typed", "alter table plain drop mood")
    run_sql(src, "alter table plain add primary key (id)")
    # typed: an enum (a type of its own in each database) -> text; plain: all built in.
    run_sql(dst, _TYPES_DDL.format(mood="mood"))
    run_sql(dst, "create table plain as select * from typed where false")
    run_sql(dst, "alter table plain drop mood", "alter table plain add primary key (id)")
    # A column of another type on the destination -> text for that table.
    run_sql(dst, "create table other as select * from plain where false")
    run_sql(dst, "alter table other alter id type bigint", "alter table other add primary key (id)")
    chosen: dict[str, bool] = {}
    real = copy_plan.binary_compatible

    def spy(s, d, columns):
        chosen[d.name] = real(s, d, columns)
        return chosen[d.name]

    copy_plan.binary_compatible = spy
    try:
        tasks = [CopyTask("typed", "typed"), CopyTask("plain", "plain"), CopyTask("plain", "other")]
        result = copy_tables(path, src, dst, tasks)
    finally:
        copy_plan.binary_compatible = real
    assert chosen == {"typed": False, "plain": True, "other": False}
    assert result.rows == {"typed": 3000, "plain": 3000, "other": 3000}
    for src_table, dst_table in (("typed", "typed"), ("plain", "plain"), ("plain", "other")):
        query = "select md5(string_agg(t::text, '|' order by id)) from {} t"
        assert one(src, query.format(src_table)) == one(dst, query.format(dst_table))


def test_python_workers_fork_from_pgferrys_daemon(spark) -> None:
    # The copy code is imported once in the daemon, not in every new Python worker.
    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == (
        "pgferry.pipeline.daemon"
    )

    def imported_before_task(_: int) -> bool:  # nested: pickled by value for the workers
        import sys

        return "pgferry.pipeline.copy.task" in sys.modules and "psycopg" in sys.modules

    assert all(spark.sparkContext.parallelize(range(4), 4).map(imported_before_task).collect())
