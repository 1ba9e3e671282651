"""The change feed (``format("pgferry")``) against a real root and the shared Spark session:
every operation with its row image, a restart from the checkpoint, admission control, and
one line for bad options."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from pgferry import stream
from pgferry.errors import PgferryError, QueueError
from pgferry.queue import api as queue_api
from pgferry.queue import ticks
from pgferry.stream.feed import Feed, FeedOptions, read_chunks, script_rows

QUEUE = "replika"


def sql(db: str, *queries: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for query in queries:
            conn.execute(query)


def tick(db: str) -> int:
    """One tick now, as the ticker would make it (no daemon)."""
    with psycopg.connect(db, autocommit=True) as conn:
        ticks.force_tick(conn, QUEUE)
        made = ticks.tick(conn, QUEUE)
    assert made is not None
    return made


def ticks_now(conn: psycopg.Connection) -> int:
    return conn.execute(
        "select max(t.tick_id) from ferry_queue.tick t join ferry_queue.queue q"
        " on q.queue_id = t.tick_queue where q.queue_name = %s",
        (QUEUE,),
    ).fetchone()[0]


def consumer_tick(db: str, consumer: str) -> int | None:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "select last_tick from ferry_queue.get_consumer_info(%s, %s)", (QUEUE, consumer)
        ).fetchone()
    return None if row is None else row[0]


@pytest.fixture
def root(db_a, write_ini, cli) -> str:
    """A root capturing public.t (id primary key, v text, n numeric), public.u (id), k
    (no key) and k2 (a key of quoted names, one with a comma)."""
    sql(
        db_a,
        "create table t (id int primary key, v text, n numeric(12,2))",
        "create table u (id int primary key)",
        "create table k (a int, b text)",  # no key: every event counts, updates carry the old row
        'create table k2 ("a,b" int, "C" text, primary key ("a,b", "C"))',
    )
    ini = write_ini("feedroot", db_a)
    assert cli(ini, "create-root", "feedroot").code == 0
    res = cli(ini, "add-table", "public.t", "public.u", "public.k", "public.k2")
    assert res.code == 0, res.err
    return db_a


@pytest.fixture
def feed(spark):
    stream.register(spark)

    def make(db: str, consumer: str = "spark_feed", queue: str = QUEUE, **options: str):
        reader = spark.readStream.format("pgferry").option("provider", db)
        reader = reader.option("queue", queue).option("consumer", consumer)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    return make


def run_available_now(df, out: Path, checkpoint: Path):
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    assert query.exception() is None
    return query


def rows(spark, out: Path) -> list:
    return spark.read.parquet(str(out)).orderBy("ev_id").collect()


def register(db: str, consumer: str = "spark_feed") -> int:
    """Register the feed's consumer now (its first query would, at the newest tick)."""
    with psycopg.connect(db, autocommit=True) as conn:
        queue_api.register_consumer(conn, QUEUE, consumer)
    at = consumer_tick(db, consumer)
    assert at is not None
    return at


def test_operations_with_their_images(root, feed, spark, tmp_path):
    registered = register(root)
    sql(root, "insert into t values (1, 'a', 1.10), (2, 'b', 2)", "insert into u values (1)")
    sql(root, "insert into k values (1, 'x')", "insert into k2 values (5, 'c')")
    first = tick(root)
    sql(root, "update k set b = 'y'", "delete from k", "delete from k2")
    sql(root, "update t set v = 'a2' where id = 1", "delete from t where id = 2")
    sql(root, "update t set id = 3 where id = 1")  # a key update: D of the old, I of the new
    second = tick(root)
    sql(root, "truncate t", "insert into t values (4, 'd', null)")
    third = tick(root)

    df = feed(root, tables='t, public.k,"k2"')  # not public.u
    assert [f.name for f in df.schema.fields][:7] == [
        "tick_id",
        "ev_id",
        "table",
        "op",
        "data",
        "key",
        "committed_at",
    ]
    run_available_now(df, tmp_path / "out", tmp_path / "ck")
    everything = rows(spark, tmp_path / "out")
    others = [r for r in everything if r.table != "public.t"]
    got = [r for r in everything if r.table == "public.t"]
    k2_key = {"a,b": 5, "C": "c"}
    assert [(r.table, r.op, r.key and json.loads(r.key)) for r in others] == [
        ("public.k", "I", None),
        ("public.k2", "I", k2_key),
        ("public.k", "U", None),
        ("public.k", "D", None),
        ("public.k2", "D", k2_key),
    ]
    assert json.loads(others[2].data) == {"a": 1, "b": "y"}
    assert json.loads(others[2].old_data) == {"a": 1, "b": "x"}
    assert [(r.tick_id, r.op, r.table) for r in got] == [
        (first, "I", "public.t"),
        (first, "I", "public.t"),
        (second, "U", "public.t"),
        (second, "D", "public.t"),
        (second, "D", "public.t"),
        (second, "I", "public.t"),
        (third, "T", "public.t"),
        (third, "I", "public.t"),
    ]
    images = [json.loads(r.data) if r.data else None for r in got]
    assert images[0] == {"id": 1, "v": "a", "n": 1.10}
    assert '"n":1.10' in got[0].data  # the image's own text: numeric digits kept
    assert images[2]["v"] == "a2"
    assert images[3] == {"id": 2, "v": "b", "n": 2}  # a delete carries the old row
    assert images[4]["id"] == 1 and images[5]["id"] == 3
    assert got[6].data is None and got[6].key is None
    assert [json.loads(r.key) for r in got if r.key] == [
        {"id": 1},
        {"id": 2},
        {"id": 1},
        {"id": 2},
        {"id": 1},
        {"id": 3},
        {"id": 4},
    ]
    # The key's text as the docs show it: compact, one text per key value (jsonb's order).
    assert got[0].key == '{"id": 1}'
    assert others[1].key == '{"C": "c", "a,b": 5}'
    assert all(r.committed_at is not None and r.ev_time is not None for r in got)
    # One micro-batch: Spark has not yet told the source it is done with it (it does so when
    # it plans the next), so the queue still holds it for a replay.
    assert consumer_tick(root, "spark_feed") == registered


def progress_rows(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


@pytest.mark.slow
def test_restart_admission_and_replay(root, feed, spark, tmp_path):
    """The first query registers the consumer; maxEventsPerTrigger cuts micro-batches at
    ticks; after a crash Spark re-runs its last planned batch from the checkpoint: the
    feed reads that tick range again (the consumer has not been moved past it) and the
    sink holds every change once."""
    out, ck = tmp_path / "out", tmp_path / "ck"
    df = feed(root, maxEventsPerTrigger="5", partitionEvents="2")  # a tick read in 3 pieces
    run_available_now(df, out, ck)  # nothing yet; registers the consumer
    start = consumer_tick(root, "spark_feed")
    assert start is not None

    for batch in range(3):
        sql(
            root,
            f"insert into t select g, 'x' from generate_series({batch * 5 + 1}, {batch * 5 + 5}) g",
        )
        tick(root)
    query = run_available_now(df, out, ck)
    assert progress_rows(query) == [5, 5, 5]
    # Spark commits a batch's end when it plans the next: the consumer stands at the start of
    # the last batch, which a crash would make Spark read again.
    last = query.lastProgress["sources"][0]
    assert consumer_tick(root, "spark_feed") == json.loads(last["startOffset"])["tick"]

    # A crash after the last batch was planned and written, before Spark recorded it done.
    done = max(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
    for log in (ck / "commits", out / "_spark_metadata"):
        (log / str(done)).unlink()
        (log / f".{done}.crc").unlink(missing_ok=True)
    sql(root, "insert into t select g, 'y' from generate_series(16, 20) g")
    tick(root)
    query = run_available_now(df, out, ck)
    assert progress_rows(query) == [5, 5]  # the last batch again, then the new tick

    ids = [
        r.id
        for r in spark.read.parquet(str(out))
        .selectExpr("get_json_object(data, '$.id') as id")
        .collect()
    ]
    assert sorted(int(i) for i in ids) == list(range(1, 21))
    assert consumer_tick(root, "spark_feed") > start

    assert stream.unregister(root, QUEUE, "spark_feed")  # a feed given up lets go of events
    with psycopg.connect(root, autocommit=True) as conn:
        assert queue_api.consumers(conn, QUEUE) == []
    assert not stream.unregister(root, QUEUE, "spark_feed")


def test_a_provider_whose_tick_is_another_fails_the_restarted_query(root, feed, spark, tmp_path):
    """Offsets carry the provider's time of their tick: a query restarted from its
    checkpoint against a provider whose tick of that id was made at another time (a
    standby promoted without it makes one under the same id) fails in one line naming
    the diverged provider, and reads none of that tick's events."""
    out, ck = tmp_path / "out", tmp_path / "ck"
    df = feed(root)
    run_available_now(df, out, ck)  # registers the consumer
    sql(root, "insert into t select g, 'x' from generate_series(1, 5) g")
    at = tick(root)
    query = run_available_now(df, out, ck)
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end["tick"] == at and "time" in end
    sql(
        root,
        "update ferry_queue.tick set tick_time = tick_time + interval '1 second'"
        f" where tick_id = {at}",
        "insert into t select g, 'after' from generate_series(6, 10) g",
    )
    tick(root)
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as caught:
        query.awaitTermination(120)
    line = stream.error_line(caught.value) or ""
    port = root.split("port=")[1].split()[0]
    assert line.startswith(f"pgferry change feed: diverged provider 127.0.0.1:{port}/"), str(
        caught.value
    )
    assert f"the query read up to tick {at} made at" in line and "Traceback" not in line
    written = spark.read.parquet(str(out)).selectExpr("get_json_object(data, '$.v') as v")
    assert [r.v for r in written.collect()] == ["x"] * 5  # nothing of the new ticks


def test_offsets_without_a_time_are_read(root):
    """An offset written before offsets carried the tick's time is still read, and the
    offsets made now carry it; one with another time is refused."""
    from pgferry.stream.source import ChangeFeedReader  # PySpark's, in the test that needs it

    register(root)
    reader = ChangeFeedReader({"provider": root, "queue": QUEUE, "consumer": "spark_feed"})
    try:
        start = reader.initialOffset()
        sql(root, "insert into t values (1, 'a')")
        at = tick(root)
        old = reader.latestOffset({"tick": start["tick"]}, reader.getDefaultReadLimit())
        assert old["tick"] == at and "time" in old
        assert len(reader.partitions({"tick": start["tick"]}, old)) == 1
        again = reader.latestOffset(old, reader.getDefaultReadLimit())
        assert again == old
        other = {"tick": at, "time": "2001-01-01T00:00:00+00:00"}
        with pytest.raises(PgferryError) as caught:
            reader.partitions(start, other)
        assert str(caught.value).startswith("pgferry change feed: diverged provider")
    finally:
        reader.stop()


def failure(df, tmp_path: Path) -> BaseException:
    """The exception a query over ``df`` fails with."""
    with pytest.raises(Exception) as caught:
        query = (
            df.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
    return caught.value


def test_bad_input_is_one_line(root, feed, spark, tmp_path):
    """A wrong queue, an unreachable provider, a consumer that is not the feed's to move,
    a table the queue does not replicate, a missing option: the failure carries one line
    saying so, no Python traceback, and nothing is registered."""
    port = root.split("port=")[1].split()[0]
    cases = [
        (feed(root, queue="nope"), "pgferry change feed: no queue 'nope' on 127.0.0.1:"),
        (
            feed(root.replace(f"port={port}", "port=1")),
            "pgferry change feed: cannot connect to 127.0.0.1:1/",
        ),
        (
            feed(root, consumer="leaf.copy.1"),
            "pgferry change feed: consumer 'leaf.copy.1' of queue 'replika'",
        ),
        (
            feed(root, tables="public.t, s.nosuch"),
            "pgferry change feed: table s.nosuch is not replicated by queue 'replika' on",
        ),
    ]
    for n, (df, wanted) in enumerate(cases):
        exc = failure(df, tmp_path / str(n))
        assert (stream.error_line(exc) or "").startswith(wanted), str(exc)
        assert "Traceback" not in str(exc)
    with psycopg.connect(root, autocommit=True) as conn:
        assert queue_api.consumers(conn, QUEUE) == []

    with pytest.raises(Exception) as caught:
        spark.readStream.format("pgferry").option("queue", QUEUE).load()
    assert stream.error_line(caught.value) == ("pgferry change feed: option 'provider' is required")


JOB = """
import sys
sys.path.insert(0, sys.argv[1])  # this tree's pgferry in the driver, as a venv's would be
from pyspark.sql import SparkSession
import pgferry.stream

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
pgferry.stream.register(spark)
df = (
    spark.readStream.format("pgferry").option("provider", sys.argv[2])
    .option("queue", "replika").option("consumer", "venv_feed").load()
)
query = (
    df.writeStream.format("parquet").option("path", sys.argv[3] + "/out")
    .option("checkpointLocation", sys.argv[3] + "/ck").trigger(availableNow=True).start()
)
query.awaitTermination(120)
assert query.exception() is None, query.exception()
print("rows", spark.read.parquet(sys.argv[3] + "/out").count())
spark.stop()
"""


@pytest.mark.slow
def test_a_virtualenv_python_not_activated(root, tmp_path):
    """A job run as ``/venv/bin/python job.py``, with a ``python3`` on PATH that has no
    pgferry (nor psycopg): the source's workers run the job's interpreter, and the feed
    reads its rows (PySpark alone would start that ``python3`` and fail in Java's stack)."""
    register(root, "venv_feed")
    sql(root, "insert into t values (1, 'a', 1), (2, 'b', 2)")
    tick(root)
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").symlink_to("/usr/bin/python3")
    (tmp_path / "job.py").write_text(JOB)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")
    }
    env["PATH"] = f"{shim}:/usr/bin:/bin"
    src = Path(stream.__file__).parents[2]
    done = subprocess.run(
        [sys.executable, str(tmp_path / "job.py"), str(src), root, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 2" in done.stdout.splitlines()


def test_worker_python_choice():
    """Which interpreter the source's workers get (no Spark needed to decide it)."""
    here = sys.executable
    other = {"PATH": "/nonexistent"}
    assert (
        stream.worker_python({"PYSPARK_PYTHON": "/x/python", **other}, None, "local", "/x/python")
        is None
    )
    assert stream.worker_python(other, "/y/python", "local[2]", "python3") == "/y/python"
    assert stream.worker_python(other, None, "local[2]", "python3") == here
    assert stream.worker_python(other, None, "spark://h:7077", "python3") is None
    bindir = str(Path(here).parent)
    if (Path(bindir) / "python3").resolve() == Path(here).resolve() and Path(
        here
    ).name == "python3":
        assert stream.worker_python({"PATH": bindir}, None, "local", "python3") is None


def test_schema_changes_are_rows(root, feed, spark, write_ini, cli, tmp_path):
    """With capture-ddl on, each captured statement comes as an ``S`` row of the table it
    changes, between the rows written before and after it; scripts queued by ``execute``
    too, statement by statement. DDL on a table the query leaves out is not in it;
    ``ddl=false`` leaves them all out."""
    ini = write_ini("feedroot", root)
    assert cli(ini, "capture-ddl", "on").code == 0
    register(root)
    sql(root, "insert into t values (1, 'a', 1)")
    sql(root, "alter table t add column c int")
    sql(root, "insert into t values (2, 'b', 2, 7)")
    sql(root, "alter table u add column x int")  # u: not in the query
    sql(root, "create index t_v on public.t (v)")
    sql(root, 'alter table k2 rename column "C" to "Ç"')
    script = tmp_path / "more.sql"
    script.write_text("alter table t add column d text;\nupdate t set d = 'x';\n")
    res = cli(ini, "execute", script)
    assert res.code == 0, res.err
    sql(root, "drop index t_v")
    tick(root)

    run_available_now(feed(root, tables="t,k2"), tmp_path / "out", tmp_path / "ck")
    got = [(r.table, r.op, r.data if r.op == "S" else None) for r in rows(spark, tmp_path / "out")]
    assert got == [
        ("public.t", "I", None),
        ("public.t", "S", "alter table t add column c int"),
        ("public.t", "I", None),
        ("public.t", "S", "create index t_v on public.t (v)"),
        ("public.k2", "S", 'alter table k2 rename column "C" to "Ç"'),
        ("public.t", "S", "alter table t add column d text"),
        # A script runs on each node as it is: its DML's rows are not row events.
        ("public.t", "S", "update t set d = 'x'"),
        ("public.t", "S", "drop index t_v"),
    ]
    # The option off: the same events without their S rows (read as an executor would).
    with psycopg.connect(root, autocommit=True) as conn:
        end = ticks_now(conn)
    plain = FeedOptions(root, QUEUE, "spark_feed", ("public.t",), None, 1000, ddl=False)
    f = Feed(plain)
    f.open()
    try:
        spans = [s for part in f.partitions(consumer_tick(root, "spark_feed"), end) for s in part]
    finally:
        f.close()
    ops = [r[3] for chunk in read_chunks(root, ("public.t",), tuple(spans), False) for r in chunk]
    assert ops == ["I", "I"]


def test_script_rows_name_their_tables():
    """Which tables a queued script's statements are rows of (no Spark, no database)."""
    queued = json.dumps(["public.t", '"Sales"."Öl"'])
    script = (
        'alter table "Sales"."Öl" add column "é" int; create function f() returns int'
        " language sql as $$select 1$$;\ncomment on table t is 'x'"
    )
    assert script_rows(script, "", queued, ()) == [
        ('"Sales"."Öl"', 'alter table "Sales"."Öl" add column "é" int'),
        ("public.t", "comment on table t is 'x'"),
    ]
    assert script_rows(script, "", queued, ("public.t",)) == [
        ("public.t", "comment on table t is 'x'")
    ]
    assert script_rows("drop index i", "local-table: public.t", queued, ()) == [
        ("public.t", "drop index i")
    ]


def test_typed_columns(root, feed, spark, write_ini, cli, tmp_path):
    """``typed=true`` with one table: ``data`` and ``old_data`` are structs of the table's
    columns in Spark types (text for the types without their own); an ``S`` row's
    statement is in ``statement``; a typed query without its one table is one line."""
    sql(
        root,
        'create table "Typé" (id int8 primary key, i2 int2, i4 int, f4 real, f8 float8,'
        " n numeric(12,3), nu numeric, t text, vc varchar(5), b bool, ts timestamp,"
        ' tz timestamptz, d date, j jsonb, ia int[], ta text[], by bytea, u uuid, "ip ÿ" inet)',
    )
    ini = write_ini("feedroot", root)
    assert cli(ini, "add-table", '"Typé"', "--trigger-arg=backup").code == 0
    assert cli(ini, "capture-ddl", "on").code == 0
    register(root)
    # The query's schema is the table's when it is defined: the column added below is not in it.
    df = feed(root, tables='"Typé"', typed="true")
    sql(
        root,
        "set timezone = 'Europe/Paris'",
        'insert into "Typé" values (1, 2, 3, 1.5, 2.25, 123456789.125, 1.000000000000000000001,'
        " 'ü', 'abc', true, '2024-02-29 10:11:12.345678', '2024-02-29 10:00+01', '2024-02-29',"
        " '{\"a\": [1, 2]}', '{1,null,3}', '{\"x,y\",z}', '\\x00ff',"
        " 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '10.0.0.1/8')",
        'insert into "Typé" (id) values (2)',
        "update \"Typé\" set t = 'v', ia = null where id = 1",
        'alter table "Typé" add column extra int',
        'delete from "Typé" where id = 2',
    )
    tick(root)

    data = df.schema["data"].dataType
    assert [(f.name, f.dataType.simpleString()) for f in data.fields] == [
        ("id", "bigint"),
        ("i2", "smallint"),
        ("i4", "int"),
        ("f4", "float"),
        ("f8", "double"),
        ("n", "decimal(12,3)"),
        ("nu", "string"),  # numeric without a precision keeps its digits as text
        ("t", "string"),
        ("vc", "string"),
        ("b", "boolean"),
        ("ts", "timestamp_ntz"),
        ("tz", "timestamp"),
        ("d", "date"),
        ("j", "string"),
        ("ia", "array<int>"),
        ("ta", "array<string>"),
        ("by", "binary"),
        ("u", "string"),
        ("ip ÿ", "string"),
    ]
    assert df.schema["old_data"].dataType == data
    run_available_now(df, tmp_path / "out", tmp_path / "ck")
    got = rows(spark, tmp_path / "out")
    assert [(r.op, r.data and r.data.id, r.statement) for r in got] == [
        ("I", 1, None),
        ("I", 2, None),
        ("U", 1, None),
        ("S", None, 'alter table "Typé" add column extra int'),
        ("D", 2, None),
    ]
    first = got[0].data
    assert (first.i2, first.i4, first.f4, first.f8) == (2, 3, 1.5, 2.25)
    assert first.n == Decimal("123456789.125") and first.nu == "1.000000000000000000001"
    assert (first.t, first.vc, first.b) == ("ü", "abc", True)
    assert first.ts == datetime(2024, 2, 29, 10, 11, 12, 345678)
    assert first.tz == datetime(2024, 2, 29, 9, 0, tzinfo=UTC).astimezone().replace(
        tzinfo=None
    )  # Spark shows a timestamp in the session's (here the machine's) time zone
    assert first.d == date(2024, 2, 29)
    assert json.loads(first.j) == {"a": [1, 2]}
    assert first.ia == [1, None, 3] and first.ta == ["x,y", "z"]
    assert bytes(first.by) == b"\x00\xff"
    assert first.u == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" and first["ip ÿ"] == "10.0.0.1/8"
    update = got[2]
    assert (update.data.t, update.data.ia, update.old_data.t, update.old_data.ia) == (
        "v",
        None,
        "ü",
        [1, None, 3],
    )
    assert got[1].old_data is None and got[1].data.i2 is None

    # A typed snapshot: the table's rows now, in the same types (the added column too).
    snap = feed(root, tables='"Typé"', typed="true", snapshot="true", consumer="typed_snap")
    run_available_now(snap, tmp_path / "snap", tmp_path / "snap_ck")
    [row] = rows(spark, tmp_path / "snap")
    assert (row.op, row.ev_id, row.key) == ("I", 0, '{"id": 1}')
    assert row.data.n == Decimal("123456789.125") and row.data.ia is None
    assert (row.data.t, row.data.ta, row.data.extra) == ("v", ["x,y", "z"], None)

    with pytest.raises(Exception) as caught:
        feed(root, typed="true", consumer="other").schema  # noqa: B018
    assert stream.error_line(caught.value) == (
        "pgferry change feed: option typed needs option tables to name one table"
    )


def replay(found: list) -> tuple[dict, list]:
    """The tables t (by key) and k (no key: a multiset) as the feed's rows rebuild them,
    snapshot rows first (their tick, ev_id 0), then every change in order."""
    keyed: dict = {}
    keyless: list = []
    for r in sorted(found, key=lambda r: (r.tick_id, r.ev_id)):
        image = r.data and json.loads(r.data, parse_float=Decimal)
        if r.table == "public.t":
            if r.op == "T":
                keyed.clear()
            elif r.op == "D":
                del keyed[json.loads(r.key)["id"]]
            else:
                keyed[image["id"]] = image
        elif r.table == "public.k":
            if r.op == "T":
                keyless.clear()
            elif r.op == "D":
                keyless.remove(image)
            elif r.op == "U":
                keyless.remove(json.loads(r.old_data, parse_float=Decimal))
                keyless.append(image)
            else:
                keyless.append(image)
    return keyed, keyless


def table_images(db: str, table: str) -> list:
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(f"select row_to_json(x)::text from {table} x").fetchall()
    return [json.loads(r[0], parse_float=Decimal) for r in rows]


def test_snapshot_then_changes_exactly_once(root, feed, spark, tmp_path):
    """``snapshot=true``: a new query's first batch is the tables' rows at a tick made for
    its snapshot, then the changes after that tick. Written to while the snapshot is taken
    and read, the snapshot's rows and the changes replay to the root's tables exactly (a
    table without a key included, where a change seen twice or missed would show)."""
    sql(
        root,
        "insert into t select g, 'v' || g, g from generate_series(1, 300) g",
        "insert into k select g % 7, 'b' || g from generate_series(1, 200) g",
    )
    tick(root)
    stop = threading.Event()
    written = []

    def writer() -> None:
        rng = random.Random(7)
        with psycopg.connect(root, autocommit=True) as conn:
            n = 1000
            while not stop.is_set():
                n += 1
                with conn.transaction():
                    conn.execute("insert into t values (%s, 'w', %s)", (n, n))
                    conn.execute(
                        "update t set v = v || 'u', n = n + 1 where id = %s", (rng.randint(1, n),)
                    )
                    conn.execute("delete from t where id = %s", (rng.randint(1, n),))
                    conn.execute("insert into k values (%s, 'w')", (n % 7,))
                    conn.execute(
                        "update k set b = b || 'u' where ctid = (select ctid from k"
                        " where a = %s limit 1)",
                        (rng.randint(0, 6),),
                    )
                    conn.execute(
                        "delete from k where ctid = (select ctid from k where a = %s limit 1)",
                        (rng.randint(0, 6),),
                    )
                written.append(n)
                if n % 10 == 0:
                    ticks.force_tick(conn, QUEUE)
                    ticks.tick(conn, QUEUE)
                time.sleep(0.005)  # pacing: the machine's two cores are shared with Spark

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        df = feed(root, snapshot="true", tables="t,k")
        first = run_available_now(df, tmp_path / "out", tmp_path / "ck")
    finally:
        stop.set()
        thread.join()
    tick(root)
    snapshot_tick = json.loads(first.recentProgress[0]["sources"][0]["endOffset"])["tick"]
    run_available_now(df, tmp_path / "out", tmp_path / "ck")

    found = spark.read.parquet(str(tmp_path / "out")).collect()
    at_snapshot = [r for r in found if r.ev_id == 0]
    assert {r.tick_id for r in at_snapshot} == {snapshot_tick}, [
        (p["sources"][0]["startOffset"], p["sources"][0]["endOffset"], p["numInputRows"])
        for p in first.recentProgress
    ]
    assert {r.op for r in at_snapshot} == {"I"}
    assert len([r for r in at_snapshot if r.table == "public.k"]) > 100
    after = [r for r in found if r.ev_id != 0]
    assert after and min(r.tick_id for r in after) > snapshot_tick
    assert len(written) > 20  # writes went on while the snapshot was taken and read
    keyed, keyless = replay(found)
    assert keyed == {row["id"]: row for row in table_images(root, "t")}
    key = lambda row: (row["a"], row["b"])  # noqa: E731
    assert sorted(keyless, key=key) == sorted(table_images(root, "k"), key=key)


def test_a_snapshot_not_held_is_one_line(root):
    """Spark restarted before a snapshot query's first batch was done asks for that
    snapshot's rows again: this process does not hold it, and says so."""
    options = FeedOptions(root, QUEUE, "spark_feed", (), None, 1000, snapshot=True)
    f = Feed(options)
    try:
        with pytest.raises(QueueError) as caught:
            f.snapshot_reads(5)
        assert str(caught.value) == (
            "pgferry change feed: the snapshot of tick 5 is gone (the query stopped before its"
            " first batch was done): start the query with a new checkpoint"
        )
        tick = f.take_snapshot()
        assert consumer_tick(root, "spark_feed") == tick
        assert [r.tick for r in f.snapshot_reads(tick)] == [tick] * 4  # t, u, k, k2
    finally:
        f.close()
