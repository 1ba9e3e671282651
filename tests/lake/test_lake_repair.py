"""repair of lake tables at one tick: a Delta and an Iceberg table damaged behind
replication's back (a row deleted, one changed, one added) are found different, fixed in
one lake commit each by ``repair --apply`` and then equal; replay goes on after it."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from pgferry.lake import delta


def _replayed(path: str) -> int | None:
    """The replay version the Delta table recorded (its app id names the owner)."""
    table = DeltaTable(path)
    owner = json.loads(table.metadata().description)["pgferry"]
    return table.transaction_version(f"pgferry:{owner}")


def _check(pair, table: str, fixes: str) -> None:
    """repair finds ``fixes``, --apply writes them, compare is then equal."""
    c = pair.cascade
    with c.running("leafnode"):
        found = c.cli("leafnode", "repair")
        assert found.code == 1, found.out + found.err
        assert f"{table}: {fixes} to fix" in found.out
        done = c.cli("leafnode", "repair", "--apply")
        assert done.code == 0, done.out + done.err
        assert f"{table}: {fixes} applied" in done.out
        done = c.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
        again = c.cli("leafnode", "repair")
        assert again.code == 0 and "0 inserts, 0 updates, 0 deletes" in again.out


def test_repair_delta(lake_pair, lake_dir) -> None:
    pair = lake_pair()
    pair.root("create table public.t (id int primary key, v text, n numeric(8,2))")
    pair.root("create table public.k (a int, b text)")
    pair.root("alter table k replica identity full")
    pair.leaf("create schema lake")
    pair.leaf("create table lake.renamed (id int primary key, v text, n numeric(8,2))")
    pair.leaf("create table public.k (a int, b text)")
    pair.root("insert into t select g, 'v' || g, g / 4.0 from generate_series(1, 40) g")
    pair.root("insert into k values (1, 'x'), (1, 'x'), (2, 'y')")
    pair.add_tables("public.t", handler="lake", dest_table="lake.renamed",
                    copy_condition="id % 2 = 0")  # fmt: skip
    pair.add_tables("public.k", handler="lake")
    pair.catch_up()
    path, kpath = str(lake_dir / "lake" / "renamed"), str(lake_dir / "public" / "k")
    replayed = _replayed(path)
    dt = DeltaTable(path)
    dt.delete("id = 4")
    dt.update(updates={"v": "'wrong'"}, predicate="id = 6")
    extra = pa.table({"id": pa.array([7, 6], pa.int32()), "v": ["odd", "twice"],
                      "n": pa.array([None, None], pa.decimal128(8, 2))})  # fmt: skip
    write_deltalake(path, extra, mode="append")  # id 7 fails the condition; 6 twice
    DeltaTable(kpath).delete("b = 'y'")
    write_deltalake(kpath, pa.table({"a": pa.array([1], pa.int32()), "b": ["x"]}), mode="append")
    versions = DeltaTable(path).version(), DeltaTable(kpath).version()
    _check(pair, "lake.renamed", "1 inserts, 1 updates, 1 deletes")
    assert DeltaTable(path).version() == versions[0] + 1  # one commit per table
    assert DeltaTable(kpath).version() == versions[1] + 1
    assert _replayed(path) == replayed  # repair keeps replay's version
    rows = sorted(r["a"] for r in delta.rows_at(kpath).to_pylist())
    assert rows == [1, 1, 2]
    # Replay goes on over the repaired table.
    with pair.cascade.running("leafnode"):
        pair.root("update t set v = 'later' where id <= 10")
        pair.root("delete from k where a = 2")
        done = pair.cascade.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err


def test_repair_iceberg(lake_pair, lake_dir) -> None:
    pytest.importorskip("pyiceberg")
    from pyiceberg.expressions import EqualTo

    from pgferry.lake import iceberg

    pair = lake_pair(lake_format="iceberg")
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v text)")
        side("create table public.k (a int, b text)")
    pair.root("alter table k replica identity full")
    pair.root("insert into t select g, 'v' || g from generate_series(1, 20) g")
    pair.root("insert into k values (1, 'x'), (2, 'y')")
    pair.add_tables("public.t", "public.k", handler="lake")
    pair.catch_up()
    cat = iceberg.catalog(str(lake_dir))
    t, k = cat.load_table(("public", "t")), cat.load_table(("public", "k"))
    schema = t.schema().as_arrow()
    t.delete(EqualTo("id", 3))
    t.delete(EqualTo("id", 5))
    t.append(pa.table({"id": [5, 99], "v": ["changed", "stray"]}).cast(schema))
    k.append(pa.table({"a": [2], "b": ["y"]}).cast(k.schema().as_arrow()))
    _check(pair, "public.t", "1 inserts, 1 updates, 1 deletes")
    rows = cat.load_table(("public", "k")).scan().to_arrow().to_pylist()
    assert sorted(r["a"] for r in rows) == [1, 2]


def test_repair_refuses_repair_where(lake_pair) -> None:
    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key)")
    pair.add_tables("public.t", handler="lake")
    pair.catch_up()
    done = pair.cascade.cli("leafnode", "repair", "--repair-where", "id > 1")
    assert done.code != 0
    assert len(done.err.strip().splitlines()) == 1 and "--repair-where" in done.err


@pytest.mark.slow
def test_repair_on_spark(lake_pair, lake_dir, spark, monkeypatch) -> None:
    """Tables over the driver's limit: Spark finds the differing rows in the source's
    scratch files and the lake version's files, only those come to the driver, one commit
    each; a fix over the bound is refused first, nothing written."""
    from pgferry.sync import lake_compare, lake_repair

    monkeypatch.setattr(lake_compare, "DRIVER_ROWS", -2)  # -1: a table not yet analyzed
    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v text, n numeric(8,2), ts timestamptz)")
        side("create table public.k (a int, b text)")
    pair.root("alter table k replica identity full")
    pair.root("insert into t select g, 'v' || g, g / 4.0, now() from generate_series(1, 300) g")
    pair.root("insert into k values (1, 'x'), (1, 'x'), (2, 'y')")
    pair.add_tables("public.t", "public.k", handler="lake")
    pair.catch_up()
    path, kpath = str(lake_dir / "public" / "t"), str(lake_dir / "public" / "k")
    dt = DeltaTable(path)
    dt.delete("id = 4")
    dt.update(updates={"v": "'wrong'"}, predicate="id = 6")
    twice = delta.rows_at(path).filter(pa.compute.field("id") == 7)
    write_deltalake(path, twice, mode="append")  # the same row twice: written anew
    stray = delta.rows_at(path).filter(pa.compute.field("id") == 8)
    stray = stray.set_column(0, "id", pa.array([1000], pa.int32()))
    write_deltalake(path, stray, mode="append")
    DeltaTable(kpath).delete("b = 'y'")
    write_deltalake(kpath, pa.table({"a": pa.array([1], pa.int32()), "b": ["x"]}), mode="append")
    versions = DeltaTable(path).version(), DeltaTable(kpath).version()
    monkeypatch.setattr(lake_repair, "MAX_FIXES", 3)
    with pair.cascade.running("leafnode"):
        done = pair.cascade.cli("leafnode", "repair", "--apply")
    assert done.code != 0, done.out + done.err
    assert "Traceback" not in done.err and "compared on the driver" not in done.err
    assert "public.t: 4 rows to fix" in done.err.splitlines()[-1]
    assert (DeltaTable(path).version(), DeltaTable(kpath).version()) == versions
    monkeypatch.setattr(lake_repair, "MAX_FIXES", 1_000_000)
    _check(pair, "public.t", "1 inserts, 2 updates, 1 deletes")  # compare on Spark too
    assert DeltaTable(path).version() == versions[0] + 1  # one commit per table
    assert DeltaTable(kpath).version() == versions[1] + 1
    rows = sorted(r["a"] for r in delta.rows_at(kpath).to_pylist())
    assert rows == [1, 1, 2]
    assert not list(lake_dir.glob(".pgferry-compare-*"))  # the scratch folders are gone
