"""An Iceberg lake leaf written merge-on-read (``lake_iceberg_deletes = merge-on-read``):
replay of updates, deletes, key updates, re-inserts and rows changed again, each batch
one snapshot with a position delete file and no data file of the load rewritten; compare
and repair of such a table; lake-compact folding the delete files into the data; a
worker SIGKILLed between the lake commit and PostgreSQL's, exactly once."""

from __future__ import annotations

import multiprocessing
import signal

import pyarrow as pa
import pytest
from conftest import sorted_rows
from lake_killed_child import killed_after_the_iceberg_merge

pytest.importorskip("pyiceberg")

from pgferry.lake import iceberg  # noqa: E402

MOR = {"lake_format": "iceberg", "lake_iceberg_deletes": "merge-on-read"}
DDL = "create table public.t (id int primary key, v text, n numeric(8,2))"


def _table(lake_dir):
    return iceberg.catalog(str(lake_dir)).load_table(("public", "t"))


def _lake_rows(lake_dir) -> list[tuple]:
    """The table as pyiceberg's own scan reads it (position deletes applied)."""
    rows = _table(lake_dir).scan().to_arrow().to_pylist()
    return sorted_rows((r["id"], r["v"], r["n"]) for r in rows)


def _files(lake_dir) -> tuple[set[str], set[str]]:
    """(data files, delete files) of the current snapshot."""
    tasks = list(_table(lake_dir).scan().plan_files())
    return {t.file.file_path for t in tasks}, {d.file_path for t in tasks for d in t.delete_files}


def _root_rows(pair) -> list[tuple]:
    return sorted_rows(pair.root("select id, v, n from t"))


def _setup(lake_pair, rows: int = 300):
    pair = lake_pair(**MOR)
    for side in (pair.root, pair.leaf):
        side(DDL)
    pair.root(f"insert into t select g, 'v' || g, g / 4.0 from generate_series(1, {rows}) g")
    pair.add_tables("public.t", handler="lake")
    return pair, pair.catch_up()


def test_replay_compare_repair_compact(lake_pair, lake_dir) -> None:
    pair, worker = _setup(lake_pair)
    loaded, _ = _files(lake_dir)
    snapshots = len(_table(lake_dir).snapshots())
    steps = [
        ["update t set v = 'u1' where id % 10 = 0"],
        ["delete from t where id between 50 and 59"],
        ["update t set id = id + 1000 where id in (1, 2)"],  # key updates
        ["insert into t values (55, 'back', 1)"],  # a deleted key inserted again
        ["update t set v = 'again' where id in (10, 20, 55, 1001)"],  # changed again
        ["update t set n = n + 1 where id = 30", "update t set n = n + 1 where id = 30",
         "delete from t where id = 31", "insert into t values (31, 'same batch', 0)"],
    ]  # fmt: skip
    for statements in steps:
        for statement in statements:
            pair.root(statement)
        pair.catch_up(worker)
        assert _lake_rows(lake_dir) == _root_rows(pair)
    data, deletes = _files(lake_dir)
    assert loaded <= data  # the load's files are read by position, never rewritten
    # one delete file per batch but the re-insert's, which replaces no live row
    assert len(deletes) == len(steps) - 1
    table = _table(lake_dir)
    assert len(table.snapshots()) == snapshots + len(steps)  # one snapshot per batch
    assert int(table.current_snapshot().summary["total-position-deletes"]) > 0

    c = pair.cascade
    with c.running("leafnode"):
        done = c.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
    # Damage behind replication's back: a row gone, one changed, one stray.
    from pyiceberg.expressions import EqualTo, In

    schema = table.schema().as_arrow()
    table.delete(In("id", {70, 80}))
    table.append(pa.table({"id": [80, 999], "v": ["wrong", "stray"],
                           "n": [None, None]}).cast(schema))  # fmt: skip
    with c.running("leafnode"):
        done = c.cli("leafnode", "compare")
        assert done.code == 1, done.out + done.err
        found = c.cli("leafnode", "repair", "--apply")
        assert found.code == 0, found.out + found.err
        assert "public.t: 1 inserts, 1 updates, 1 deletes applied" in found.out
        done = c.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
        # Replay goes on, merge-on-read, over the repaired table.
        pair.root("update t set v = 'after repair' where id in (3, 70, 80)")
        pair.root("delete from t where id = 4")
        done = c.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
    assert _lake_rows(lake_dir) == _root_rows(pair)
    assert not _table(lake_dir).scan(row_filter=EqualTo("id", 999)).to_arrow().num_rows

    done = c.cli("leafnode", "lake-compact")
    assert done.code == 0, done.out + done.err
    data, deletes = _files(lake_dir)
    assert not deletes and not data & loaded  # rewritten: the delete files folded in
    assert _lake_rows(lake_dir) == _root_rows(pair)
    pair.root("update t set v = 'after compaction' where id % 7 = 0")
    pair.root("delete from t where id = 5")
    pair.catch_up(pair.worker())
    assert _lake_rows(lake_dir) == _root_rows(pair)
    assert len(_files(lake_dir)[1]) == 1


def test_compaction_during_replay_folds_deletes(lake_pair, lake_dir) -> None:
    """Merge-on-read chosen by the table's handler argument (the ini says nothing), and
    lake_compact_interval folding the delete files into the data every third commit."""
    pair = lake_pair(lake_compact_interval="3", lake_format="iceberg")
    for side in (pair.root, pair.leaf):
        side(DDL)
    pair.root("insert into t select g, 'v' || g, g from generate_series(1, 100) g")
    pair.add_tables("public.t", handler="lake", handler_args=["deletes=merge-on-read"])
    worker = pair.catch_up()
    seen = []
    for n in range(6):
        pair.root(f"update t set v = 'x{n}' where id % 5 = {n % 5}")
        pair.root(f"delete from t where id = {n + 50}")
        pair.catch_up(worker)
        assert _lake_rows(lake_dir) == _root_rows(pair)
        seen.append(len(_files(lake_dir)[1]))
    assert max(seen) > 0  # merge-on-read
    assert 0 in seen[1:]  # compacted: no delete file left then
    assert max(seen) < 3  # never more delete files than commits since a compaction


def test_killed_between_the_lake_commit_and_postgresql_s(lake_pair, lake_dir) -> None:
    """The worker is SIGKILLed right after its merge-on-read commit: the batch comes
    again, its part is found in the lake and skipped; every change is there once."""
    pair, worker = _setup(lake_pair, 100)
    pair.root("update t set v = 'first' where id <= 20")
    pair.catch_up(worker)
    pair.root("update t set v = 'killed' where id between 10 and 30")
    pair.root("delete from t where id between 40 and 45")
    pair.root("insert into t values (1000, 'new', 2)")
    tick = pair.tick()
    before = pair.last_tick()
    for w in pair.workers:
        w.conns.close()  # the child's worker takes the node's lock
    child = multiprocessing.get_context("spawn").Process(
        target=killed_after_the_iceberg_merge, args=(str(pair.leaf_cfg.path),)
    )
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    assert pair.last_tick() == before  # the lake holds the batch, the node not
    assert _lake_rows(lake_dir) == _root_rows(pair)
    version = iceberg.applied_version(iceberg_spec(pair))
    pair.catch_up(pair.worker())
    assert (pair.last_tick() or 0) >= tick
    assert _lake_rows(lake_dir) == _root_rows(pair)
    table = _table(lake_dir)
    held = [s for s in table.snapshots()
            if s.summary and s.summary.additional_properties.get(iceberg.VERSION)
            == str(version)]  # fmt: skip
    assert len(held) == 1  # the batch's part is one commit, not written again
    # This process's index of the table predates the child's commit: found stale, rebuilt.
    pair.root("update t set v = 'after the kill' where id between 25 and 35")
    pair.catch_up()
    assert _lake_rows(lake_dir) == _root_rows(pair)


def iceberg_spec(pair):
    from pgferry.db import connect
    from pgferry.handlers.lake import _lake_specs
    from pgferry.registry import entries

    with connect(pair.leaf_dsn) as conn:
        tables = [
            (e.table_name, e.table_attrs or {}) for e in entries.list_tables(conn, pair.queue)
        ]
    ((_, spec),) = list(_lake_specs(tables))
    return spec


@pytest.mark.slow
def test_compare_on_spark(lake_pair, lake_dir, spark, monkeypatch) -> None:
    """A table over the driver's limit is compared on Spark: the lake's data files read
    less the rows its position delete files name; equal, and unequal once damaged."""
    from pyiceberg.expressions import EqualTo

    from pgferry.sync import lake_compare

    monkeypatch.setattr(lake_compare, "DRIVER_ROWS", -2)  # -1: a table not yet analyzed
    pair, worker = _setup(lake_pair)
    pair.root("update t set v = 'x' where id % 3 = 0")
    pair.root("delete from t where id < 20")
    pair.catch_up(worker)
    assert _files(lake_dir)[1]
    c = pair.cascade
    with c.running("leafnode"):
        done = c.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
        assert "public.t: srcdb: 281 rows" in done.out
        _table(lake_dir).delete(EqualTo("id", 30))
        done = c.cli("leafnode", "compare")
        assert done.code == 1, done.out + done.err
