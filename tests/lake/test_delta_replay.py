"""A Delta lake leaf: initial load, then replay of inserts, updates, deletes, a key update,
a TRUNCATE and a keyless table, each batch one Delta commit per table."""

from __future__ import annotations

import pytest
from conftest import sorted_rows

TYPES = """create table public.t (
    id int primary key, v text, n numeric(10,2), ts timestamptz, d date, a int[],
    j jsonb, b bytea, f double precision, ok boolean, big bigint, u uuid, tsn timestamp,
    e mood, ua uuid[])"""
COLS = "id, v, n, ts, d, a, j::text, b, f, ok, big, u::text, tsn, e::text, ua::text[]"


def test_load_and_replay(lake_pair, delta_rows) -> None:
    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create type mood as enum ('sad', 'ok')")
        side(TYPES)
    pair.root(
        "insert into t select g, 'v' || g, g / 7.0, '2024-01-01 12:00+02'::timestamptz + g * "
        "interval '1 hour', date '2024-02-29' + g, array[g, null, 3], jsonb_build_object('g', g),"
        " decode('00ff', 'hex'), g / 3.0, g % 2 = 0, g * 10000000000, gen_random_uuid(),"
        " '2020-01-01 00:00:00.123456'::timestamp + g * interval '1 day', 'ok',"
        " array[gen_random_uuid()]"
        " from generate_series(1, 50) g"
    )
    pair.add_tables("public.t", handler="lake")
    pair.catch_up()
    assert delta_rows("t") == sorted_rows(pair.root(f"select {COLS} from t"))
    assert pair.leaf("select count(*) from t") == [(0,)]  # the shape stays empty

    pair.root("update t set v = 'changed', a = '{}' where id <= 10")
    pair.root("delete from t where id between 11 and 20")
    pair.root("update t set id = id + 1000 where id = 30")  # a key update
    pair.root("insert into t (id, v) values (5000, null)")
    pair.catch_up()
    assert delta_rows("t") == sorted_rows(pair.root(f"select {COLS} from t"))

    pair.root("truncate t")
    pair.root("insert into t (id, v) values (1, 'after')")
    pair.catch_up()
    assert delta_rows("t") == [(1, "after", *(None,) * 13)]


def test_keyless_multiset(lake_pair, delta_rows) -> None:
    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.k (a int, b text)")
    pair.root("alter table k replica identity full")
    pair.root("insert into k values (1, 'x'), (1, 'x'), (2, 'y')")
    pair.add_tables("public.k", handler="lake")
    pair.catch_up()
    assert delta_rows("k") == [(1, "x"), (1, "x"), (2, "y")]
    pair.root("delete from k where ctid = (select min(ctid) from k where a = 1)")
    pair.root("insert into k values (2, 'y'), (3, null)")
    pair.catch_up()
    assert delta_rows("k") == sorted_rows(pair.root("select a, b from k"))


@pytest.mark.slow
def test_load_on_spark(lake_pair, lake_dir, delta_rows, spark, monkeypatch) -> None:
    """The load as a Spark job, as for a large table: tasks write the files, one commit."""
    from deltalake import DeltaTable

    from pgferry.pipeline import lake_copy

    monkeypatch.setattr(lake_copy, "LOCAL_PAGES", 0)
    monkeypatch.setattr(lake_copy, "FILE_ROWS", 700)  # several files per range
    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v text, n numeric(12,3))")
    pair.root("insert into t select g, repeat('x', g % 50), g / 3.0"
              " from generate_series(1, 3000) g")  # fmt: skip
    pair.add_tables("public.t", handler="lake")
    pair.catch_up(timeout=180)
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))
    table = DeltaTable(str(lake_dir / "public" / "t"))
    assert len(table.file_uris()) >= 4
    assert [h["operation"] for h in table.history()] == ["WRITE", "CREATE TABLE"]


def test_load_of_text_values(lake_pair, delta_rows) -> None:
    """The load's CSV path: empty strings and NULLs, quotes, commas and newlines in text,
    timestamps with and without a zone, booleans, json, floats."""
    pair = lake_pair()
    ddl = ("create table public.s (id int primary key, v text, ok boolean, ts timestamptz,"
           " tsn timestamp, d date, f real, j json, n numeric(5,1))")  # fmt: skip
    for side in (pair.root, pair.leaf):
        side(ddl)
    pair.root(
        "insert into s values (1, '', true, '2024-06-01 10:00:00.5+05', '2024-06-01 10:00',"
        " '2024-02-29', 1.5, '{\"a\": [1, \"x,y\"]}', -0.5),"
        " (2, null, false, null, null, null, null, null, null),"
        " (3, e'line\\n\"two\", three', null, '1999-12-31 23:59:59.999999+00',"
        " '0001-01-01 00:00', '1970-01-01', -3.25e2, '\"\"', 9999.9)"
    )
    pair.add_tables("public.s", handler="lake")
    pair.catch_up()
    cols = "id, v, ok, ts, tsn, d, f, j::text, n"
    assert delta_rows("s") == sorted_rows(pair.root(f"select {cols} from s"))


@pytest.mark.parametrize("bad", ["ts = 'infinity'", "tsn = '0044-03-15 BC'"])
def test_replay_refuses_a_timestamp_without_a_lake_value(lake_pair, delta_rows, bad) -> None:
    """An infinite timestamp or a year BC stops the batch naming the table and the value,
    as it stops the load; nothing of the batch reaches the lake (no NULL, no year AD)."""
    from pgferry.errors import PgferryError

    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.w (id int primary key, ts timestamptz, tsn timestamp)")
    pair.root("insert into w values (1, '2024-01-01 00:00+00', '2024-01-01')")
    pair.add_tables("public.w", handler="lake")
    pair.catch_up()
    before = delta_rows("w")
    pair.root(f"update w set {bad} where id = 1")
    pair.root("insert into w values (2, now(), now()::timestamp)")
    pair.tick()
    with pytest.raises(PgferryError) as failed:
        for _ in range(20):
            pair.worker().work()
    message = str(failed.value)
    assert "public.w" in message and "no lake value" in message, message
    assert "\n" not in message
    assert delta_rows("w") == before  # the batch wrote nothing
