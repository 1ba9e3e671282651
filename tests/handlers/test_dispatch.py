"""The dispatch handler: rows into time partitions by batch time, a date column (plain and
declarative partitions) and event time (every version kept), retention, bad arguments."""

from __future__ import annotations

import pytest

from pgferry.handlers import dispatch
from tests.fixtures.fix_cli import one_error

_one_error = one_error


def _children(c, node: str, parent: str) -> list[str]:
    rows = c.sql(
        node,
        "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid"
        " where i.inhparent = %s::regclass order by 1",
        (parent,),
    )
    return [r[0] for r in rows]


@pytest.fixture
def pair(make_cascade, db_a, db_b):
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("leaf", db_b, "leaf", "root")
    return c


@pytest.mark.parametrize("mode", ["batch_time", "current_time"])
def test_batch_time_keep_latest(pair, mode):
    c = pair
    c.sql("root", "create table ev (id int primary key, v text)")
    c.sql("leaf", "create table ev (id int primary key, v text)")
    c.add("root", "ev")
    args = [f"part_mode={mode}", "period=hour", "row_mode=keep_latest"]
    c.add("leaf", "ev", handler="dispatch", handler_args=args, expect_sync=True)
    c.sql("root", "insert into ev select g, 'v' || g from generate_series(1, 40) g")
    c.catch_up("leaf")
    c.sql("root", "update ev set v = 'new' || id where id <= 10")
    c.sql("root", "delete from ev where id between 11 and 15")
    c.sql("root", "insert into ev values (41, 'late')")
    c.catch_up("leaf")
    source = c.sql("root", "select id, v from ev order by id")
    parts = _children(c, "leaf", "public.ev")
    assert parts and all(p.startswith("ev_") and len(p) == len("ev_2024_01_01_00") for p in parts)
    held = []
    for part in parts:
        held += c.sql("leaf", f'select id, v from only public."{part}"')
    assert sorted(held) == source  # every row once, in some partition
    assert c.sql("leaf", "select count(*) from only ev")[0][0] == 0  # nothing in the parent
    c.sql("root", "insert into ev values (42, 'gone')")
    c.sql("root", "truncate ev")
    c.sql("root", "insert into ev values (43, 'after')")
    c.catch_up("leaf")
    assert c.sql("leaf", "select id, v from ev") == [(43, "after")]


def test_date_field_plain_with_retention(pair):
    c = pair
    ddl = "create table ev (id int primary key, at timestamptz not null, v text)"
    c.sql("root", ddl)
    c.sql("leaf", ddl)
    c.add("root", "ev")
    # Partitions from before: one of this naming, old (dropped), one of another naming.
    c.sql("leaf", "create table ev_2001_01 (like ev including all) inherits (ev)")
    c.sql("leaf", "create table ev_archive (like ev including all) inherits (ev)")
    c.sql("leaf", "insert into ev_archive values (-1, '2001-01-05', 'kept')")
    args = ["part_mode=date_field", "part_field=at", "period=month",
            "retention_period=10 years"]  # fmt: skip
    c.add("leaf", "ev", handler="dispatch", handler_args=args, expect_sync=True)
    c.sql(
        "root",
        "insert into ev select g, timestamptz '2024-01-31 23:30+00' + g * interval '9 days',"
        " 'v' || g from generate_series(0, 9) g",
    )
    c.catch_up("leaf")
    c.sql("root", "update ev set v = 'changed' where id in (1, 5)")
    c.sql("root", "delete from ev where id = 2")
    c.catch_up("leaf")
    source = c.sql("root", "select id, at, v from ev order by id")
    parts = _children(c, "leaf", "public.ev")
    assert "ev_2001_01" not in parts  # retention: older than 10 years
    assert "ev_archive" in parts  # not of this naming: left alone
    months = sorted({f"ev_{at.year}_{at.month:02d}" for _, at, _ in source})
    assert [p for p in parts if p != "ev_archive"] == months
    held = []
    for part in months:
        rows = c.sql("leaf", f'select id, at, v from only public."{part}"')
        assert all(f"ev_{at.year}_{at.month:02d}" == part for _, at, _ in rows)
        held += rows
    assert sorted(held) == source


def test_declarative_keep_latest(pair):
    c = pair
    c.sql("root", "create table ev (id int primary key, day date not null, v text)")
    c.sql(
        "leaf",
        "create table ev (id int, day date not null, v text, primary key (id, day))"
        " partition by range (day)",
    )
    c.sql("leaf", "create table ev_old partition of ev for values from ('2020-01-01')"
                  " to ('2024-01-01')")  # fmt: skip
    c.add("root", "ev")
    args = ["part_mode=date_field", "part_field=day", "period=month", "row_mode=keep_latest"]
    c.add("leaf", "ev", handler="dispatch", handler_args=args, expect_sync=True)
    c.sql("root", "insert into ev select g, date '2023-12-20' + g * 7, 'v' || g"
                  " from generate_series(1, 12) g")  # fmt: skip
    c.catch_up("leaf")
    c.sql("root", "update ev set day = day + 40, v = 'moved' where id in (1, 2, 3)")
    c.sql("root", "update ev set v = 'changed' where id = 4")
    c.sql("root", "update ev set v = 'twice' where id = 4")
    c.sql("root", "delete from ev where id = 12")
    c.catch_up("leaf")
    source = c.sql("root", "select id, day, v from ev order by id")
    assert c.sql("leaf", "select id, day, v from ev order by id") == source
    placed = c.sql("leaf", "select tableoid::regclass::text, day from ev")
    for table, day in placed:
        want = "ev_old" if day.year < 2024 else f"ev_{day.year}_{day.month:02d}"
        assert table == want
    assert len({t for t, _ in placed}) > 2


def test_event_time_keep_all(pair):
    c = pair
    c.sql("root", "create table ev (id int primary key, v text)")
    c.sql("leaf", "create table ev (vid bigserial primary key, id int, v text)")
    c.add("root", "ev")
    args = ["part_mode=event_time", "period=year", "row_mode=keep_all", "ignore_truncate=1"]
    c.add("leaf", "ev", handler="dispatch", handler_args=args, expect_sync=True)
    versions = []
    c.sql("root", "insert into ev values (1, 'a'), (2, 'b')")
    versions += [(1, "a"), (2, "b")]
    c.sql("root", "update ev set v = 'a2' where id = 1")
    c.sql("root", "update ev set v = 'a3' where id = 1")
    versions += [(1, "a2"), (1, "a3")]
    c.catch_up("leaf")
    c.sql("root", "delete from ev where id = 2")  # ignored
    c.sql("root", "truncate ev")  # ignored (ignore_truncate)
    c.sql("root", "insert into ev values (2, 'b2')")
    versions += [(2, "b2")]
    c.catch_up("leaf")
    assert c.sql("leaf", "select id, v from ev order by vid") == versions
    assert c.sql("leaf", "select count(*) from only ev")[0][0] == 0
    assert len(_children(c, "leaf", "public.ev")) == 1


def test_null_date_stops_replay(pair):
    c = pair
    c.sql("root", "create table ev (id int primary key, day date)")
    c.sql("leaf", "create table ev (id int primary key, day date)")
    c.add("root", "ev")
    args = ["part_mode=date_field", "part_field=day", "period=year", "row_mode=keep_latest"]
    c.add("leaf", "ev", handler="dispatch", handler_args=args, expect_sync=True)
    c.sql("root", "insert into ev values (1, null)")
    c.sql("root", "update ev set day = '2024-05-01'")  # the last version has a date: fine
    c.sql("root", "insert into ev values (2, '2023-01-01')")
    c.catch_up("leaf")
    assert c.sql("leaf", "select id, day::text, tableoid::regclass::text from ev order by id") == [
        (1, "2024-05-01", "ev_2024"),
        (2, "2023-01-01", "ev_2023"),
    ]
    c.sql("root", "insert into ev values (3, null)")
    c.tick()
    with pytest.raises(Exception, match="NULL part_field"):
        for _ in range(20):
            c.worker("leaf").work()
    assert c.sql("leaf", "select count(*) from ev")[0][0] == 2  # the batch rolled back


def test_bad_dispatch_arguments(pair, new_db_b):
    c = pair
    c.sql("root", "create table ev (id int primary key, at date, v text)")
    c.sql("leaf", "create table ev (id int primary key, at date, v text)")
    c.sql("root", "create table p (id int primary key, at date)")
    c.sql("leaf", "create table p (id int, at date, primary key (id, at)) partition by range (at)")
    c.add("root", "ev", "p")
    ok = ["--handler=dispatch", "--expect-sync"]
    cases = [
        (["ev", "--handler=dispatch"], "no initial copy: add the table with --expect-sync"),
        (["ev", *ok, "--handler-arg=part_mode=date_field"], "needs part_field"),
        (["ev", *ok, "--handler-arg=part_field=at"], "part_field is for part_mode=date_field"),
        (["ev", *ok, "--handler-arg=part_mode=date_field", "--handler-arg=part_field=nope"],
         "has no column nope"),
        (["ev", *ok, "--handler-arg=part_mode=date_field", "--handler-arg=part_field=v"],
         "part_field v is text, not a date"),
        (["ev", *ok, "--handler-arg=part_name=%(parent)s_%(year)s"], "lacks %(month)s"),
        (["ev", *ok, "--handler-arg=part_name=%(parent)s_%(yr)s"], "not a name template"),
        (["ev", *ok, "--handler-arg=period=week"], "must be one of hour, day, month, year"),
        (["ev", *ok, "--handler-arg=retention_period=soon"], "retention_period 'soon'"),
        (["ev", *ok, "--handler-arg=retention_period=-1 day"], "is not > 0"),
        (["ev", *ok, "--handler-arg=row_mode=keep_all"], "needs a column the source lacks"),
        (["ev", *ok, f"--handler-arg=part_name={'x' * 60}_%(year)s_%(month)s_%(day)s"],
         "longer than 63 bytes"),
        (["p", *ok], "is partitioned: it must be by range on part_field"),
    ]  # fmt: skip
    for args, message in cases:
        line = _one_error(c.cli("leaf", "add-table", *args))
        assert message in line, (args, line)
        assert c.sql("leaf", "select count(*) from ferry.table_info where local")[0][0] == 0
    c.node("branch", new_db_b(None), "branch", "root")
    c.sql("branch", "create table ev (id int primary key, at date, v text)")
    line = _one_error(c.cli("branch", "add-table", "ev", *ok))
    assert "dispatch is for leaf nodes" in line
    listed = c.cli("leaf", "show-handlers", "dispatch")
    assert listed.code == 0 and "retention_period" in listed.out


def test_partition_names():
    from datetime import datetime

    from pgferry.handlers.partitions import Naming, default_template

    n = Naming("s", "Ev", default_template("hour"), "hour")
    start = datetime(2024, 3, 9, 7)
    assert n.name(start) == "Ev_2024_03_09_07"
    assert n.parse("Ev_2024_03_09_07") == start
    assert n.parse("Ev_2024_13_09_07") is None and n.parse("Other_2024_03_09_07") is None
    m = Naming("s", "t", "%(parent)s$%(year)s%(month)s", "month")
    assert m.parse(m.name(datetime(1999, 12, 1))) == datetime(1999, 12, 1)
    assert dispatch.Dispatch.name == "dispatch"
