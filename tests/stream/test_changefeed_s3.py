"""The change feed into a Delta table on object storage, as docs/changefeed.md writes it
(*Into object storage*): a ``foreachBatch`` that appends each micro-batch through delta-rs
with the batch's id as an application transaction, against the S3-protocol server of the
tests (moto's, ``pgferry.testing.s3``: no real cloud is reachable here).  A batch Spark
runs again after a crash is found in the table and not written twice."""

from __future__ import annotations

import json

import psycopg
import pytest

from pgferry import stream
from pgferry.lake import delta, storage
from pgferry.queue import ticks
from pgferry.testing.s3 import moto_server

QUEUE = "replika"
APP = "shop_changes"  # the application id of the feed's commits in the Delta table

pytest.importorskip("deltalake")


def _sql(db: str, *queries: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for query in queries:
            conn.execute(query)


def _tick(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        ticks.force_tick(conn, QUEUE)
        assert ticks.tick(conn, QUEUE) is not None


def delta_batches(target: str, options: dict[str, str]):
    """The docs' ``foreachBatch`` function: one Delta commit per micro-batch, skipped when
    the table already holds that batch (Spark runs a batch again after a crash)."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import TableNotFoundError
    from deltalake.transaction import CommitProperties, Transaction

    def write(batch, batch_id: int) -> None:
        try:
            done = DeltaTable(target, storage_options=options).transaction_version(APP)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:
            return
        write_deltalake(
            target, batch.toArrow(), mode="append", storage_options=options,
            commit_properties=CommitProperties(app_transactions=[Transaction(APP, batch_id)]),
        )  # fmt: skip

    return write


@pytest.mark.slow
def test_feed_into_delta_on_a_store(db_a, write_ini, cli, spark, tmp_path) -> None:
    from deltalake import DeltaTable

    _sql(db_a, "create table t (id int primary key, v text)")
    ini = write_ini("feedroot", db_a)
    assert cli(ini, "create-root", "feedroot").code == 0
    assert cli(ini, "add-table", "public.t").code == 0
    stream.register(spark)
    with moto_server() as server:
        server.client.create_bucket(Bucket="lake")
        options = storage.delta_options(server.options())
        target = "s3://lake/changes/shop"
        checkpoint = tmp_path / "ck"  # Spark's own log: a local (or HDFS) folder

        def run() -> None:
            changes = (
                spark.readStream.format("pgferry").option("provider", db_a)
                .option("queue", QUEUE).option("consumer", "s3_feed")
                .option("maxEventsPerTrigger", "5").load()
            )  # fmt: skip
            query = (
                changes.writeStream.foreachBatch(delta_batches(target, options))
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True).start()
            )  # fmt: skip
            query.awaitTermination(120)
            assert not query.isActive and query.exception() is None

        run()  # registers the consumer
        for start in (1, 6, 11):
            _sql(db_a, f"insert into t select g, 'x' from generate_series({start}, {start + 4}) g")
            _tick(db_a)
        run()
        table = DeltaTable(target, storage_options=options)
        version = table.version()
        # A crash after the last batch was written, before Spark recorded it done.
        commits = checkpoint / "commits"
        done = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        (commits / str(done)).unlink()
        (commits / f".{done}.crc").unlink(missing_ok=True)
        _sql(db_a, "update t set v = 'y' where id = 3")
        _tick(db_a)
        run()
        table = DeltaTable(target, storage_options=options)
        assert table.version() == version + 1  # the batch run again wrote nothing
        assert table.transaction_version(APP) == done + 1
        rows = delta.rows_at(target, ["op", "data"], storage_options=options).to_pylist()
        ids = sorted((r["op"], json.loads(r["data"])["id"]) for r in rows)
        assert ids == sorted([("I", i) for i in range(1, 16)] + [("U", 3)])
        keys = server.keys("lake", "changes/shop/")
        assert any(k.endswith(".parquet") for k in keys)
