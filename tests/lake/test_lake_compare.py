"""compare of a lake leaf at one tick, with a renamed table and a copy condition."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake


def test_compare_against_delta(lake_pair, lake_dir) -> None:
    pair = lake_pair()
    pair.root("create table public.t (id int primary key, v text, n numeric(8,2))")
    pair.leaf("create schema lake")
    pair.leaf("create table lake.renamed (id int primary key, v text, n numeric(8,2))")
    pair.root("insert into t select g, 'v' || g, g / 4.0 from generate_series(1, 40) g")
    pair.add_tables("public.t", handler="lake", dest_table="lake.renamed",
                    copy_condition="id % 2 = 0")  # fmt: skip
    pair.catch_up()
    pair.root("update t set v = 'changed' where id < 10")
    pair.root("delete from t where id between 30 and 35")
    c = pair.cascade
    with c.running("leafnode"):
        done = c.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
        assert "lake.renamed: srcdb: 17 rows" in done.out
        # A row appears in the lake behind replication's back.
        path = str(lake_dir / "lake" / "renamed")
        extra = pa.table({"id": pa.array([1000], pa.int32()), "v": ["stray"],
                          "n": pa.array([None], pa.decimal128(8, 2))})  # fmt: skip
        write_deltalake(path, extra, mode="append")
        done = c.cli("leafnode", "compare")
        assert done.code == 1, done.out + done.err
        assert "Results do not match" in done.out


@pytest.mark.slow
def test_compare_on_spark(lake_pair, lake_dir, spark, monkeypatch) -> None:
    """A table over the driver's limit: Spark tasks write the source's rows, Spark reads
    them and the lake version's files."""
    from pgferry.sync import lake_compare

    monkeypatch.setattr(lake_compare, "DRIVER_ROWS", -2)  # -1: a table not yet analyzed
    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v text, ts timestamptz)")
    pair.root("insert into t select g, 'v' || g, now() from generate_series(1, 300) g")
    pair.add_tables("public.t", handler="lake")
    pair.catch_up()
    pair.root("update t set v = null where id < 50")
    c = pair.cascade
    with c.running("leafnode"):
        done = c.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
        assert "public.t: srcdb: 300 rows" in done.out
        extra = pa.table({"id": pa.array([1000], pa.int32()), "v": ["stray"],
                          "ts": pa.array([None], pa.timestamp("us", tz="UTC"))})  # fmt: skip
        write_deltalake(str(lake_dir / "public" / "t"), extra, mode="append")
        done = c.cli("leafnode", "compare")
        assert done.code == 1, done.out + done.err
    assert not list(lake_dir.glob(".pgferry-compare-*"))  # the scratch folder is gone
