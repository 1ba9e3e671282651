"""A lake leaf whose lake is on object storage (``lake_path = s3://bucket/prefix``), against
an S3-protocol server started by the tests (moto's, see ``conftest.s3_server``): the initial
load, replay, compare, repair and compaction write and read the bucket, nothing is
written to a local folder, and the secret key is never printed."""

from __future__ import annotations

import os

import pytest
from conftest import s3_rows, sorted_rows


def test_delta_on_s3(make_pair, s3_lake, tmp_path, capsys) -> None:
    server, path = s3_lake
    bucket = path.removeprefix("s3://").split("/")[0]
    pair = make_pair(lake_path=path, **server.settings())
    for side in (pair.root, pair.leaf):
        side("create table public.orders (id int primary key, v text, n numeric(10,2))")
    pair.root("insert into orders select g, 'v' || g, g / 4.0 from generate_series(1, 300) g")
    pair.add_tables("public.orders", handler="lake")
    worker = pair.catch_up()
    location = f"{path}/public/orders"
    query = "select id, v, n from orders"
    assert s3_rows(server, location) == sorted_rows(pair.root(query))
    assert any(k.endswith(".parquet") for k in server.keys(bucket, "lake/public/orders/"))
    assert not os.path.exists("s3:") and not (tmp_path / "s3:").exists()

    pair.root("update orders set v = 'changed' where id <= 20")
    pair.root("delete from orders where id > 280")
    pair.root("insert into orders values (1000, null, 1.5)")
    pair.catch_up(worker)
    assert s3_rows(server, location) == sorted_rows(pair.root(query))

    c = pair.cascade
    with c.running("leafnode"):
        assert c.cli("leafnode", "compare").code == 0
    assert c.cli("leafnode", "lake-compact").code == 0
    assert s3_rows(server, location) == sorted_rows(pair.root(query))

    # Damage the lake table with delta-rs itself, then repair it in one commit.
    from deltalake import DeltaTable

    from pgferry.lake import storage

    table = DeltaTable(location, storage_options=storage.delta_options(server.options()))
    table.delete("id <= 5")
    with c.running("leafnode"):
        assert c.cli("leafnode", "compare").code == 1
        assert c.cli("leafnode", "repair").code == 1
        assert c.cli("leafnode", "repair", "--apply").code == 0
        assert c.cli("leafnode", "compare").code == 0
    assert s3_rows(server, location) == sorted_rows(pair.root(query))
    out = capsys.readouterr()
    assert server.secret not in out.out + out.err


def test_iceberg_on_s3(make_pair, s3_lake) -> None:
    """An Iceberg lake on the store: the warehouse (metadata and data) in the bucket, the
    SQLite catalog on this machine beside the ini (recorded with the table)."""
    pytest.importorskip("pyiceberg")
    from pgferry.lake import iceberg
    from pgferry.lake.spec import LakeSpec

    server, path = s3_lake
    bucket = path.removeprefix("s3://").split("/")[0]
    pair = make_pair(lake_path=path, lake_format="iceberg", **server.settings())
    for side in (pair.root, pair.leaf):
        side("create table public.t (id bigint primary key, v text)")
    pair.root("insert into t select g, 'v' || g from generate_series(1, 200) g")
    pair.add_tables("public.t", handler="lake")
    worker = pair.catch_up()
    args = pair.leaf("select table_attrs->'handler_args' from ferry.table_info where local")[0][0]
    catalog = args["catalog"]
    assert catalog == str(
        pair.leaf_cfg.path.parent / f"{pair.leaf_cfg.job_name}_iceberg_catalog.db"
    )
    assert os.path.isfile(catalog)
    spec = LakeSpec("iceberg", path, "public", "t", args["owner"], server.options(), catalog)

    def rows() -> list[tuple]:
        return sorted_rows(tuple(r.values()) for r in iceberg.read(spec).to_pylist())

    assert rows() == sorted_rows(pair.root("select id, v from t"))
    keys = server.keys(bucket, "lake/public/t/")
    assert any("/metadata/" in k for k in keys) and any(k.endswith(".parquet") for k in keys)
    assert not any(k.endswith(".db") for k in server.keys(bucket))

    pair.root("update t set v = 'changed' where id <= 10")
    pair.root("delete from t where id > 190")
    pair.catch_up(worker)
    assert rows() == sorted_rows(pair.root("select id, v from t"))
    # merge-on-read (the default) on the store: a position delete file beside the rows
    assert any(k.endswith("-deletes.parquet") for k in server.keys(bucket, "lake/public/t/"))
    with pair.cascade.running("leafnode"):
        assert pair.cascade.cli("leafnode", "compare").code == 0
