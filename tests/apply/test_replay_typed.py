"""Typed replay: user-defined types, read-ahead of several tables, plain inserts on drift."""

from __future__ import annotations

import pytest

from pgferry.handlers.upsert import PLAIN_INSERT_ROWS

SCHEMA = """
create schema if not exists "Typed Ü";
create type "Typed Ü"."Mood" as enum ('sad', 'ok', 'happy');
create domain "Typed Ü".percent as numeric(5, 2) check (value between 0 and 100);
create table "Typed Ü"."Items" (
    "Id" bigint primary key, mood "Typed Ü"."Mood", share "Typed Ü".percent,
    moods "Typed Ü"."Mood"[], note varchar(12), at timestamptz
);
create table "Typed Ü".log (id int primary key, item bigint, msg text);
create table "Typed Ü".pairs (a int, b text, v text, primary key (a, b));
"""
TABLES = ('"Typed Ü"."Items"', '"Typed Ü".log', '"Typed Ü".pairs')


def _same(pair) -> None:
    for table, key in zip(TABLES, ('"Id"', "id", "a, b"), strict=True):
        q = f"select t::text from {table} t order by {key}"
        assert pair.leaf(q) == pair.root(q), table


@pytest.mark.parametrize("read_ahead_events", ["0", "1000000"], ids=["read-ahead", "inline"])
def test_user_types_and_tables_read_ahead(make_pair, read_ahead_events) -> None:
    pair = make_pair(replay_read_ahead_events=read_ahead_events)
    pair.root(SCHEMA)
    pair.leaf(SCHEMA)
    pair.root(
        """insert into "Typed Ü"."Items"
           select g, (array['sad','ok','happy'])[1 + g % 3]::"Typed Ü"."Mood", g % 100,
                  array['ok', 'happy']::"Typed Ü"."Mood"[], 'n' || g, now()
             from generate_series(1, 300) g"""
    )
    pair.add_tables(*TABLES)
    worker = pair.catch_up()
    _same(pair)
    # One batch touching three tables: inserts only, updates, deletes, a key change.
    pair.root(
        """insert into "Typed Ü".log select g, g % 300, repeat('x', g % 7)
             from generate_series(1, 3000) g"""
    )
    pair.root("""update "Typed Ü"."Items" set mood = 'happy', share = 99.5 where "Id" % 5 = 0""")
    pair.root("""delete from "Typed Ü"."Items" where "Id" % 11 = 0""")
    pair.root("""update "Typed Ü"."Items" set "Id" = "Id" + 10000 where "Id" < 4""")
    pair.root(
        """insert into "Typed Ü".pairs select g % 40, 'k' || (g % 3), 'v' || g
             from generate_series(1, 100) g on conflict (a, b) do update set v = excluded.v"""
    )
    pair.catch_up(worker)
    _same(pair)
    assert pair.leaf('select count(*) from "Typed Ü".log') == [(3000,)]


@pytest.mark.parametrize("rows", [5, PLAIN_INSERT_ROWS + 500])
def test_plain_insert_falls_back_to_upsert_on_drift(pair, rows: int) -> None:
    # A few rows are upserted at once; many get the plain insert, and its fallback here.
    pair.root(SCHEMA)
    pair.leaf(SCHEMA)
    pair.add_tables(*TABLES)
    worker = pair.catch_up()
    # A row written on the subscriber behind replication's back (the guard bypassed).
    pair.leaf(
        "set session_replication_role = replica;"
        """ insert into "Typed Ü".log values (2, 0, 'drift')"""
    )
    pair.root(
        """insert into "Typed Ü".log select g, g, 'root' from generate_series(1, %s) g""",
        (rows,),
    )
    pair.catch_up(worker)
    _same(pair)
    assert pair.leaf("""select msg from "Typed Ü".log where id = 2""") == [("root",)]


def test_subscriber_types_the_provider_lacks(pair) -> None:
    """The subscriber keeps its own enum and domain where the source has plain text/numeric."""
    pair.root(
        "create schema if not exists own_types;"
        " create table own_types.t (id int primary key, mood text, pct numeric, tags text[])"
    )
    pair.leaf(
        "create schema if not exists own_types;"
        " create type own_types.mood as enum ('sad', 'ok', 'happy');"
        " create domain own_types.pct as numeric check (value between 0 and 100);"
        " create table own_types.t (id int primary key, mood own_types.mood,"
        " pct own_types.pct, tags text[])"
    )
    pair.root("insert into own_types.t values (1, 'ok', 50, '{a,b}'), (2, 'sad', 1.5, null)")
    pair.add_tables("own_types.t")
    worker = pair.catch_up()
    pair.root("insert into own_types.t values (3, 'happy', 99.9, '{\"x y\"}')")
    pair.root("update own_types.t set mood = 'happy', pct = 7 where id = 1")
    pair.root("delete from own_types.t where id = 2")
    pair.catch_up(worker)
    q = "select id, mood::text, pct::numeric, tags from own_types.t order by id"
    assert pair.leaf(q) == pair.root(q)
