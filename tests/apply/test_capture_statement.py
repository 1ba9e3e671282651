"""Capture by statement end to end: statements of many rows, key updates and key swaps
within one statement, upserts, writable CTEs and mixed transactions are captured by the
statement triggers of a plain table added with ``capture=statement``, replayed by a leaf,
and the tables compared row by row (docs/events.md)."""

from __future__ import annotations

import psycopg
import pytest

from pgferry.errors import TableError, UsageError
from pgferry.node import tableops
from pgferry.registry.capture_spec import CaptureSpec

# Columns named like the aliases of the generated statement function (n, o, k).
DDL = 'create table public."Stm t" ("Id" int primary key, n text, o int, k int unique)'
TABLE = 'public."Stm t"'
STATEMENT = tableops.AddTableOptions(trigger_args=("capture=statement",))


def add(pair) -> None:
    with psycopg.connect(pair.root_dsn) as conn:
        tableops.add_tables(pair.root_cfg, conn, [TABLE], STATEMENT)
    with psycopg.connect(pair.leaf_dsn) as conn:
        tableops.add_tables(
            pair.leaf_cfg, conn, [TABLE], tableops.AddTableOptions(expect_sync=True)
        )


def contents(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(f'select * from {TABLE} order by "Id"').fetchall()  # type: ignore[arg-type]


def test_statements_of_many_rows_replay_exactly(pair) -> None:
    for side in (pair.root, pair.leaf):
        side(DDL)
    add(pair)
    # Statement triggers, not a row trigger.
    assert pair.root(
        "select tgname, tgtype & 1 = 0 from pg_trigger where tgrelid = %s::regclass"
        " and tgname like '%%capture%%' order by 1",
        (TABLE,),
    ) == [
        (f"_ferry_{pair.queue}_capture", True),
        (f"_ferry_{pair.queue}_capture_delete", True),
        (f"_ferry_{pair.queue}_capture_insert", True),
    ]
    worker = pair.worker()
    # Keys moved onto keys other rows had (151..200 -> 161..210): D, I and U events of one
    # statement.  The primary key is checked row by row: the rows are stored in descending
    # order and updated in that order (a sequential scan), so that no key is taken twice.
    with psycopg.connect(pair.root_dsn, autocommit=True) as conn:
        conn.execute(
            f"insert into {TABLE} select g, 'r' || g, g, g from generate_series(200, 1, -1) g"
        )
        conn.execute("set enable_indexscan = off")
        conn.execute("set enable_bitmapscan = off")
        conn.execute(f'update {TABLE} set "Id" = "Id" + 10, k = k + 1000 where "Id" > 150')
    statements = [
        f"update {TABLE} set n = n || 'x', o = o + 1",
        f'delete from {TABLE} where "Id" % 7 = 0',
        # An upsert: some rows inserted, others updated, by one statement.
        f"insert into {TABLE} select g, 'u' || g, -g, 5000 + g from generate_series(190, 230) g"
        f' on conflict ("Id") do update set n = excluded.n, o = excluded.o',
        # One query deleting a key and inserting it again, and another the other way.
        f'with d as (delete from {TABLE} where "Id" = 12 returning *)'
        f" insert into {TABLE} select \"Id\", 'again', o, k from d",
        f"with i as (insert into {TABLE} values (999, 'i', 0, 999) returning \"Id\")"
        f' delete from {TABLE} where "Id" = 13',
        f"update {TABLE} set o = o where false",  # no row: nothing queued
    ]
    for statement in statements:
        pair.root(statement)
    # A transaction of statements on the same keys, and a truncate in the middle of one.
    with psycopg.connect(pair.root_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(f"insert into {TABLE} values (500, 'a', 1, 500), (501, 'b', 2, 501)")
        conn.execute(f'update {TABLE} set "Id" = 502 where "Id" = 500')
        conn.execute(f'delete from {TABLE} where "Id" = 501')
        conn.execute(f"insert into {TABLE} values (501, 'c', 3, 501)")
        conn.execute(f'update {TABLE} set "Id" = "Id" + 1, k = k + 10 where "Id" in (501, 502)')
    pair.catch_up(worker)
    root = contents(pair.root_dsn)
    assert root == contents(pair.leaf_dsn)
    assert len(root) > 150
    with psycopg.connect(pair.root_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(f"truncate {TABLE}")
        conn.execute(f"insert into {TABLE} select g, 't', g, g from generate_series(1, 30) g")
    pair.catch_up(worker)
    assert (
        contents(pair.root_dsn) == contents(pair.leaf_dsn) == [(g, "t", g, g) for g in range(1, 31)]
    )


def test_events_of_a_statement(pair) -> None:
    """What a statement queues: one event per row, the deleted keys first."""
    pair.root(DDL)
    with psycopg.connect(pair.root_dsn) as conn:
        tableops.add_tables(pair.root_cfg, conn, [TABLE], STATEMENT)
    with psycopg.connect(pair.root_dsn, autocommit=True) as conn:
        # Stored and updated in descending order: no key is taken twice (see above).
        conn.execute(f"insert into {TABLE} select g, 'a', g, g from generate_series(4, 1, -1) g")
        conn.execute("set enable_indexscan = off")
        conn.execute("set enable_bitmapscan = off")
        conn.execute(f'update {TABLE} set "Id" = "Id" + 2, k = k + 10')  # 1..4 -> 3..6
    pair.root(f'delete from {TABLE} where "Id" > 4')
    events = pair.root(
        "select ev_type, (ev_data::json->>'Id')::int from ferry_queue.event"
        " where ev_extra1 = %s order by ev_id",
        (TABLE,),
    )
    assert events[:4] == [('I:"Id"', g) for g in (4, 3, 2, 1)]
    update = events[4:10]
    assert update[:2] in ([('D:"Id"', 1), ('D:"Id"', 2)], [('D:"Id"', 2), ('D:"Id"', 1)])
    assert sorted(update[2:]) == [('I:"Id"', 5), ('I:"Id"', 6), ('U:"Id"', 3), ('U:"Id"', 4)]
    assert sorted(events[10:]) == [('D:"Id"', 5), ('D:"Id"', 6)]


def test_columns_added_and_dropped_in_one_session(pair) -> None:
    """A session that captured rows, then changed the table, queues the new row shape."""
    with psycopg.connect(pair.root_dsn) as conn:
        conn.execute("create table public.s (id int primary key, a text)")
        conn.commit()
        tableops.add_tables(pair.root_cfg, conn, ["public.s"], STATEMENT)
    with psycopg.connect(pair.root_dsn, autocommit=True) as conn:
        conn.execute("insert into public.s values (1, 'x')")
        conn.execute("alter table public.s add column b int default 7")
        conn.execute("update public.s set a = 'y'")
        conn.execute("alter table public.s drop column a")
        conn.execute("insert into public.s values (2)")
        events = conn.execute(
            "select ev_type, ev_data from ferry_queue.event"
            " where ev_extra1 = 'public.s' order by ev_id"
        ).fetchall()
    assert events == [
        ("I:id", '{"id":1,"a":"x"}'),
        ("U:id", '{"id":1,"a":"y","b":7}'),
        ("I:id", '{"id":2,"b":7}'),
    ]


def capture_triggers(pair, table: str) -> list[tuple[str, bool]]:
    """(name, fires per row) of the queue's capture triggers on ``table``."""
    return pair.root(
        "select tgname, tgtype & 1 = 1 from pg_trigger where tgrelid = %s::regclass"
        " and tgname like '%%capture%%' order by 1",
        (table,),
    )


def test_a_plain_table_gets_a_row_trigger_unless_asked(pair) -> None:
    """A row trigger costs less than statement triggers for one-row statements, the most
    common on a primary: it is the default (docs/events.md)."""
    pair.root("create table public.p (id int primary key, v text)")
    with psycopg.connect(pair.root_dsn) as conn:
        tableops.add_tables(pair.root_cfg, conn, ["public.p"], tableops.AddTableOptions())
    assert capture_triggers(pair, "public.p") == [(f"_ferry_{pair.queue}_capture", True)]
    spec = pair.root("select table_attrs->'capture' from ferry.table_info where local")
    assert spec == [({"key": ["id"]},)]


@pytest.mark.parametrize(
    ("ddl", "args", "why"),
    [
        ("create table public.r (id int primary key, v text, w text)",
         ("capture=statement", "ignore=w"), "cannot be captured by statement"),
        ("create table public.r (id int, v text)", ("capture=statement",),
         "cannot be captured by statement"),
        ("create table public.r (id int primary key, v text) partition by range (id);"
         " create table public.r1 partition of public.r for values from (0) to (10)",
         ("capture=statement",), "cannot be captured by statement"),
    ],
)  # fmt: skip
def test_capture_statement_refused_where_it_cannot_hold(pair, ddl, args, why) -> None:
    """Options, no key, a partitioned table: refused with one line, nothing registered,
    no trigger left."""
    pair.root(ddl)
    with psycopg.connect(pair.root_dsn) as conn, pytest.raises(TableError, match=why):
        tableops.add_tables(
            pair.root_cfg, conn, ["public.r"], tableops.AddTableOptions(trigger_args=args)
        )
    assert pair.root("select count(*) from ferry.table_info where table_name = 'public.r'") == [
        (0,)
    ]
    assert capture_triggers(pair, "public.r") == []


@pytest.mark.pure
def test_capture_argument_parsed() -> None:
    assert CaptureSpec.parse(None, ["capture=statement"]).capture == "statement"
    assert CaptureSpec.parse(None, []).capture == "row"
    spec = CaptureSpec(key=("id",), key_from="primary key", capture="statement")
    assert spec.to_dict() == {"key": ["id"], "capture": "statement"}
    assert CaptureSpec.from_dict(spec.to_dict()) == spec
    assert spec.plain  # the key's plain function, only by statement
    with pytest.raises(UsageError, match="capture=rows: say capture=row or capture=statement"):
        CaptureSpec.parse(None, ["capture=rows"])
