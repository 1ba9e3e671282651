"""``spark.read.format("pgferry-lake")``: a lake leaf's Delta and Iceberg tables (one
written merge-on-read) read by Spark without jars, at their newest version and as of a
tick, filtered, and only the columns asked for."""

from __future__ import annotations

import pytest
from conftest import sorted_rows

from pgferry.lake import delta, iceberg
from pgferry.lake.spec import LakeSpec


def _newest_tick(lake_dir, fmt: str) -> int:
    spec = LakeSpec(fmt, str(lake_dir), "public", "t", "")
    tick = (delta if fmt == "delta" else iceberg).newest_tick(spec)
    assert tick is not None
    return tick


# "Mixed Col": pyiceberg writes it as Mixed_x20Col in its Parquet files (read by field id).
# iceberg-merge-on-read: its batches leave position delete files, which the source applies.
@pytest.mark.parametrize("fmt", ["delta", "iceberg-copy-on-write", "iceberg-merge-on-read"])
def test_read_newest_and_at_tick(lake_pair, lake_dir, spark, fmt) -> None:
    from pgferry.stream import lake_source

    fmt, _, deletes = fmt.partition("-")
    pair = lake_pair(lake_format=fmt, **({"lake_iceberg_deletes": deletes} if deletes else {}))
    for side in (pair.root, pair.leaf):
        side('create table public.t (id bigint primary key, v text, n numeric(10,2),'
             ' "Mixed Col" int)')  # fmt: skip
    pair.root("insert into t select g, 'v' || g, g / 4.0, g % 5 from generate_series(1, 2000) g")
    pair.add_tables("public.t", handler="lake")
    pair.catch_up()
    first_tick = _newest_tick(lake_dir, fmt)
    first = pair.root('select id, v, n, "Mixed Col" from t')

    pair.root("update t set v = 'changed' where id % 100 = 0")
    pair.root("delete from t where id between 300 and 400")
    pair.root("insert into t values (5000, 'new', 1.5, null)")
    pair.catch_up()
    # Inserts only: a file of their own, keys 10001 to 10100.
    pair.root("insert into t select g, 'w', 0, 1 from generate_series(10001, 10100) g")
    pair.catch_up()
    assert _newest_tick(lake_dir, fmt) > first_tick
    if deletes:
        from pgferry.lake import snapshots

        spec = LakeSpec(fmt, str(lake_dir), "public", "t", "")
        held = snapshots.delete_files(spec, _newest_tick(lake_dir, fmt))
        assert bool(held) == (deletes == "merge-on-read")

    lake_source.register(spark)
    path = str(lake_dir / "public" / "t")
    now = spark.read.format("pgferry-lake").load(path)
    assert now.columns == ["id", "v", "n", "Mixed Col"]
    assert sorted_rows(now.collect()) == sorted_rows(
        pair.root('select id, v, n, "Mixed Col" from t')
    )

    then = spark.read.format("pgferry-lake").option("tick", first_tick).load(path)
    assert sorted_rows(then.collect()) == sorted_rows(first)

    # Filters: Spark's, after the scan; right rows for every query of one DataFrame.
    some = now.where("id > 10050").select("id", "v")
    assert sorted_rows(some.collect()) == sorted_rows(
        pair.root("select id, v from t where id > 10050")
    )
    odd = now.where("n > 400 or v = 'new'").select("id")
    assert sorted_rows(odd.collect()) == sorted_rows(
        pair.root("select id from t where n > 400 or v = 'new'")
    )
    fresh = now.where("id <= 3").select("id")
    assert sorted_rows(fresh.collect()) == [(1,), (2,), (3,)]
    narrow = spark.read.format("pgferry-lake").option("columns", "id,Mixed Col").load(path)
    assert narrow.columns == ["id", "Mixed Col"]
    assert narrow.count() == now.count()
    nulls = now.where('"Mixed Col" is null'.replace('"', "`")).select("id")
    assert [tuple(r) for r in nulls.collect()] == [(5000,)]


def test_bad_path(lake_dir, spark) -> None:
    from pgferry.stream import lake_source

    lake_source.register(spark)
    with pytest.raises(Exception, match="no Delta or Iceberg table at"):
        spark.read.format("pgferry-lake").load(str(lake_dir / "nothing")).collect()
