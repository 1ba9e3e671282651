"""The lake's Spark paths on object storage, against the S3-protocol server of the tests
(moto's, ``conftest.s3_server``: no real cloud is reachable here): the initial load's
Spark tasks writing their Parquet files into the bucket, ``compare`` and ``repair --apply``
of a table over the driver's share read by Spark's Python tasks, and
``spark.read.format("pgferry-lake")`` of a Delta and an Iceberg table on the store, now and
as of a tick.  The secret key is in no message, no Spark conf and no plan Spark prints."""

from __future__ import annotations

import pytest
from conftest import s3_rows, sorted_rows

from pgferry.lake import formats, iceberg, storage
from pgferry.lake.spec import LakeSpec


def _setup(make_pair, s3_lake, fmt: str, rows: int = 400):
    server, path = s3_lake
    settings = server.settings() if fmt == "delta" else server.settings(lake_format="iceberg")
    pair = make_pair(lake_path=path, **settings)
    for side in (pair.root, pair.leaf):
        side('create table public.t (id int primary key, v text, n numeric(10,2),'
             ' ts timestamptz, "Mixed Col" int)')  # fmt: skip
    pair.root(f"insert into t select g, 'v' || g, g / 4.0, '2024-01-01'::timestamptz + g * "
              f"interval '1 minute', g % 7 from generate_series(1, {rows}) g")  # fmt: skip
    return server, path, pair


QUERY = 'select id, v, n, ts, "Mixed Col" from t'
# Spark hands a timestamp with a zone back as a naive local time: the reads by Spark are
# compared without it (the compare and repair tests compare it through pyarrow).
NO_TS = 'select id, v, n, "Mixed Col" from t'


def _spec(pair, path: str, server, fmt: str) -> LakeSpec:
    args = pair.leaf("select table_attrs->'handler_args' from ferry.table_info where local")[0][0]
    return LakeSpec(fmt, path, "public", "t", args["owner"], server.options(),
                    args.get("catalog", ""))  # fmt: skip


def _lake_rows(spec: LakeSpec) -> list[tuple]:
    table = formats.module(spec.format).read(spec)
    return sorted_rows(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.slow
def test_load_through_spark_tasks(make_pair, s3_lake, spark, monkeypatch, capsys) -> None:
    """A table over the driver's share is loaded by Spark tasks, which write their Parquet
    files into the bucket with the store's options carried in the task."""
    from pgferry.pipeline import lake_copy

    monkeypatch.setattr(lake_copy, "LOCAL_PAGES", -1)  # every table through Spark
    jobs: list[int] = []
    run_groups = lake_copy.run_groups

    def counted(session, job, groups, cancelled):
        jobs.append(len(groups))
        return run_groups(session, job, groups, cancelled)

    monkeypatch.setattr(lake_copy, "run_groups", counted)
    server, path, pair = _setup(make_pair, s3_lake, "delta")
    pair.add_tables("public.t", handler="lake")
    pair.catch_up()
    assert jobs and jobs[0] >= 1  # the load ran as a Spark job
    location = f"{path}/public/t"
    assert s3_rows(server, location) == sorted_rows(pair.root(QUERY))
    bucket = path.removeprefix("s3://").split("/")[0]
    assert any(k.endswith(".parquet") for k in server.keys(bucket, "lake/public/t/"))
    conf = " ".join(f"{k}={v}" for k, v in spark.sparkContext.getConf().getAll())
    assert server.secret not in conf
    out = capsys.readouterr()
    assert server.secret not in out.out + out.err


def _damage(spec: LakeSpec) -> None:
    """A row deleted, one changed and one added behind replication's back, with the
    format's own library."""
    import pyarrow as pa

    if spec.format == "delta":
        from deltalake import DeltaTable, write_deltalake

        options = storage.delta_options(spec.storage)
        table = DeltaTable(spec.location, storage_options=options)
        table.delete("id <= 3")
        table.update(updates={"v": "'wrong'"}, predicate="id = 6")
        stray = formats.module("delta").read(spec).filter(pa.compute.field("id") == 8)
        stray = stray.set_column(0, "id", pa.array([1000], pa.int32()))
        write_deltalake(spec.location, stray, mode="append", storage_options=options)
        return
    table = iceberg._table(spec)
    table.delete("id <= 3")
    rows = table.scan(row_filter="id = 6").to_arrow()
    table.delete("id = 6")
    table.append(rows.set_column(1, "v", pa.array(["wrong"], rows.schema.field("v").type)))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_compare_and_repair_on_spark(make_pair, s3_lake, spark, monkeypatch, capsys,
                                     fmt) -> None:  # fmt: skip
    """Over the driver's share: the source's rows written by Spark tasks into a scratch
    prefix of the bucket, both sides read by Spark's Python tasks through pyarrow's S3 file
    system, the fix written in one commit, the scratch prefix removed."""
    from pgferry.sync import lake_compare

    monkeypatch.setattr(lake_compare, "DRIVER_ROWS", -2)  # -1: a table not yet analyzed
    server, path, pair = _setup(make_pair, s3_lake, fmt)
    pair.add_tables("public.t", handler="lake")
    worker = pair.catch_up()
    pair.root("update t set v = null where id between 10 and 20")
    pair.catch_up(worker)
    spec = _spec(pair, path, server, fmt)
    c = pair.cascade
    with c.running("leafnode"):
        done = c.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
        assert "public.t: srcdb: 400 rows" in done.out
    _damage(spec)
    assert _lake_rows(spec) != sorted_rows(pair.root(QUERY))
    with c.running("leafnode"):
        done = c.cli("leafnode", "compare")
        assert done.code == 1, done.out + done.err
        done = c.cli("leafnode", "repair", "--apply")
        assert done.code == 0, done.out + done.err
        fixed = "3 inserts, 1 updates, 1 deletes" if fmt == "delta" else "3 inserts, 1 updates"
        assert fixed in done.out + done.err
        done = c.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
    assert _lake_rows(spec) == sorted_rows(pair.root(QUERY))
    bucket = path.removeprefix("s3://").split("/")[0]
    assert not [k for k in server.keys(bucket) if ".pgferry-compare-" in k]
    out = capsys.readouterr()
    assert server.secret not in out.out + out.err


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_lake_source_on_s3(make_pair, s3_lake, spark, capsys, fmt) -> None:
    """``spark.read.format("pgferry-lake")`` of a table on the store: its newest version
    and the one of an earlier tick, with the store's options (and, for Iceberg, the
    catalog's file); a wrong secret is one line with the secret masked."""
    from pgferry.stream import lake_source

    server, path, pair = _setup(make_pair, s3_lake, fmt, rows=300)
    pair.add_tables("public.t", handler="lake")
    worker = pair.catch_up()
    spec = _spec(pair, path, server, fmt)
    first_tick = formats.module(fmt).newest_tick(spec)
    assert first_tick is not None
    first = sorted_rows(pair.root(NO_TS))
    pair.root("update t set v = 'changed' where id % 50 = 0")
    pair.root("delete from t where id between 100 and 120")
    pair.root("insert into t values (5000, 'new', 1.5, null, null)")
    pair.catch_up(worker)

    lake_source.register(spark)
    options = {
        "endpoint": server.endpoint, "region": server.region,
        "access_key_id": server.key, "secret_access_key": server.secret,
    }  # fmt: skip
    if fmt == "iceberg":
        options["catalog"] = spec.catalog
    table = f"{path}/public/t"

    def reader():
        return spark.read.format("pgferry-lake").options(**options)

    now = reader().load(table)
    assert now.columns == ["id", "v", "n", "ts", "Mixed Col"]
    assert sorted_rows(now.drop("ts").collect()) == sorted_rows(pair.root(NO_TS))
    then = reader().option("tick", first_tick).load(table)
    assert sorted_rows(then.drop("ts").collect()) == first
    some = reader().option("columns", "id,Mixed Col").load(table).where("id > 4000")
    assert [tuple(r) for r in some.collect()] == [(5000, None)]
    now.explain(True)
    out = capsys.readouterr()
    assert server.secret not in out.out + out.err

    # Bad input: one line naming the path, the secret in none.
    missing = "s3://no-such-bucket/lake/public/t"
    with pytest.raises(Exception) as failed:
        reader().load(missing).collect()
    text = str(failed.value)
    assert "pgferry-lake: " in text and missing in text and server.secret not in text
    if fmt == "iceberg":
        del options["catalog"]
        with pytest.raises(Exception, match="Iceberg table on a store: give its catalog"):
            reader().load(table).collect()


def test_source_store_from_the_environment(s3_lake, monkeypatch) -> None:
    """Without options the source takes the store from the standard AWS_* environment, as
    delta-rs does, and its tasks read a file of the store through pyarrow (no Spark)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from pgferry.lake import snapshots
    from pgferry.stream.lake_source import _Table

    server, path = s3_lake
    location = f"{path}/public/t"
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", None, "c"]})
    write_deltalake(location, rows, storage_options=storage.delta_options(server.options()))
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    monkeypatch.setenv("AWS_REGION", server.region)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret)
    table = _Table.at(location + "/", {})
    assert (table.path, table.format) == (location, "delta")
    assert server.secret not in repr(table)
    schema = table.arrow_schema(None)
    files = table.files(None, [])
    assert files and all(f.path.startswith(location + "/") for f in files)
    wanted = pa.schema([schema.field("v"), schema.field("id")])
    read = [b for f in files for b in snapshots.read_file(f.path, table.storage, schema,
                                                          ["v", "id"], wanted)]  # fmt: skip
    got = pa.Table.from_batches(read)
    assert sorted(zip(got["id"].to_pylist(), got["v"].to_pylist(), strict=True)) == [
        (1, "a"), (2, None), (3, "c")
    ]  # fmt: skip
