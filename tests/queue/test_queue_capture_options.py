"""Capture specs (``ferry_queue.attach_capture_spec``): the events each option produces,
the functions behind them across rotation, and their clean-up (docs/events.md)."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg.types.json import Jsonb
from queue_helpers import Scalar, take_batch, tick


@pytest.fixture
def queue(qconn: psycopg.Connection, scalar: Scalar) -> psycopg.Connection:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    return qconn


def attach(conn: psycopg.Connection, table: str, **spec: object) -> str:
    row = conn.execute(
        "select ferry_queue.attach_capture_spec('q', %s::regclass, %s)", (table, Jsonb(spec))
    ).fetchone()
    assert row is not None
    return row[0]


def events(conn: psycopg.Connection) -> list[tuple]:
    """(ev_type, ev_data as a dict, ev_extra2 .. ev_extra4) of the next batch."""
    tick(conn, "q")
    rows = take_batch(conn, "q", "c") or []
    return [
        (e[4], json.loads(e[5]) if e[5] else None, json.loads(e[7]) if e[7] else None)
        + tuple(e[8:10])
        for e in rows
    ]


@pytest.mark.parametrize("row_capture", ["c", "plpgsql"])
def test_plain_spec_uses_the_plain_function(
    queue: psycopg.Connection, scalar: Scalar, row_capture: str
) -> None:
    """A spec with a key and no option gets the function attach_capture gives: the C one
    where the server has it (ext/pgferry_capture), else the PL/pgSQL one of its key."""
    queue.execute("select set_config('ferry_queue.row_capture', %s, false)", (row_capture,))
    queue.execute("create table a (id int primary key, v text)")
    queue.execute("create table b (id int primary key)")
    scalar("select ferry_queue.attach_capture('q', 'a')")
    in_c = scalar("select ferry_queue.row_capture_in_c()")
    if row_capture == "plpgsql":
        assert in_c is False
    named = scalar("select cf_name from ferry_queue.capture_function")  # PL/pgSQL only
    assert attach(queue, "b", key=["id"]) == ("plain_row_capture" if in_c else named)
    queue.execute("insert into b values (1)")
    queue.execute("update b set id = 2")
    assert [e[:2] for e in events(queue)] == [
        ("I:id", {"id": 1}),
        ("D:id", {"id": 1}),
        ("I:id", {"id": 2}),
    ]


def test_keyless_update_carries_the_old_row(queue: psycopg.Connection) -> None:
    queue.execute('create table "Log Tbl" ("Msg" text, n int)')
    attach(queue, '"Log Tbl"', key=[])
    queue.execute("""insert into "Log Tbl" values ('a', 1), ('a', 1)""")
    queue.execute("""update "Log Tbl" set n = 2 where ctid = (select min(ctid) from "Log Tbl")""")
    queue.execute("""delete from "Log Tbl" where n = 1""")
    assert events(queue) == [
        ("I:", {"Msg": "a", "n": 1}, None, None, None),
        ("I:", {"Msg": "a", "n": 1}, None, None, None),
        ("U:", {"Msg": "a", "n": 2}, {"Msg": "a", "n": 1}, None, None),
        ("D:", {"Msg": "a", "n": 1}, None, None, None),
    ]


def test_ignored_columns(queue: psycopg.Connection) -> None:
    queue.execute('create table t (id int primary key, v text, "Seen At" timestamptz, hits int)')
    attach(queue, "t", key=["id"], ignore=["Seen At", "hits"])
    queue.execute("insert into t values (1, 'a', now(), 0)")
    queue.execute("""update t set "Seen At" = now(), hits = hits + 1""")  # ignored only
    queue.execute("update t set hits = hits")  # changes nothing: still queued
    queue.execute("update t set v = 'b', hits = 7")
    queue.execute("delete from t")
    assert [e[:2] for e in events(queue)] == [
        ("I:id", {"id": 1, "v": "a"}),
        ("U:id", {"id": 1, "v": "a"}),
        ("U:id", {"id": 1, "v": "b"}),
        ("D:id", {"id": 1, "v": "b"}),
    ]


def test_when_condition_follows_rows_in_and_out(queue: psycopg.Connection) -> None:
    queue.execute('create table t (id int primary key, "Kind" text)')
    attach(queue, "t", key=["id"], when=""""Kind" = 'keep'""")
    queue.execute("insert into t values (1, 'keep'), (2, 'drop'), (3, null)")
    queue.execute("""update t set "Kind" = 'keep' where id = 2""")  # enters: I
    queue.execute("""update t set "Kind" = 'drop' where id = 1""")  # leaves: D
    queue.execute("update t set id = 20 where id = 2")  # key change inside: D + I
    queue.execute("""update t set "Kind" = 'other' where id = 3""")  # never in: nothing
    queue.execute("delete from t")  # only the row inside
    assert [e[:2] for e in events(queue)] == [
        ("I:id", {"id": 1, "Kind": "keep"}),
        ("I:id", {"id": 2, "Kind": "keep"}),
        ("D:id", {"id": 1, "Kind": "keep"}),
        ("D:id", {"id": 2, "Kind": "keep"}),
        ("I:id", {"id": 20, "Kind": "keep"}),
        ("D:id", {"id": 20, "Kind": "keep"}),
    ]


def test_backup_and_extra_fields(queue: psycopg.Connection) -> None:
    queue.execute("create table t (id int primary key, v text)")
    attach(queue, "t", key=["id"], backup=True, ev_extra3="'shard=' || (id % 2)", ev_extra4="v")
    queue.execute("insert into t values (1, 'a')")
    queue.execute("update t set v = 'b'")
    queue.execute("delete from t")
    assert events(queue) == [
        ("I:id", {"id": 1, "v": "a"}, None, "shard=1", "a"),
        ("U:id", {"id": 1, "v": "b"}, {"id": 1, "v": "a"}, "shard=1", "b"),
        ("D:id", {"id": 1, "v": "b"}, None, "shard=1", "b"),
    ]


def test_operations_before_and_skip(queue: psycopg.Connection, scalar: Scalar) -> None:
    queue.execute("create table ins_only (id int primary key)")
    queue.execute("create table qtable (id int primary key, v text)")
    queue.execute("create table before (id int primary key)")
    attach(queue, "ins_only", key=["id"], ops="I")
    attach(queue, "qtable", key=["id"], skip=True)
    attach(queue, "before", key=["id"], before=True)
    kinds = queue.execute(
        "select tgrelid::regclass::text, tgtype::int from pg_trigger"
        " where tgname = '_ferry_q_capture' order by 1"
    ).fetchall()
    # tgtype bits: 1 row, 2 before, 4 insert, 8 delete, 16 update.
    assert kinds == [("before", 1 | 2 | 4 | 8 | 16), ("ins_only", 1 | 4), ("qtable", 1 | 2 | 28)]
    queue.execute("insert into ins_only values (1)")
    queue.execute("update ins_only set id = 2")
    queue.execute("delete from ins_only")
    queue.execute("insert into qtable values (1, 'x')")
    queue.execute("insert into before values (5)")
    queue.execute("delete from before")
    assert scalar("select count(*) from qtable") == 0  # the write was cancelled
    assert scalar("select count(*) from before") == 0  # deleted: BEFORE let it through
    assert [e[:2] for e in events(queue)] == [
        ("I:id", {"id": 1}),
        ("I:id", {"id": 1, "v": "x"}),
        ("I:id", {"id": 5}),
        ("D:id", {"id": 5}),
    ]


def test_templated_functions_follow_rotation_share_and_go(
    queue: psycopg.Connection, scalar: Scalar
) -> None:
    # a's plain function, at the end, is its PL/pgSQL one (not the C one shared by all).
    queue.execute("set ferry_queue.row_capture = 'plpgsql'")
    queue.execute("create table a (id int primary key, v text, w text)")
    queue.execute("create table b (x int, y int)")
    first = attach(queue, "a", key=["id"], ignore=["w"])
    assert attach(queue, "a", key=["id"], ignore=["w"]) == first  # same template, same one
    keyless = attach(queue, "b", key=[])
    scalar("select ferry_queue.set_queue_config('q', 'rotation_period', '0')")
    queue.execute("insert into a values (1, 'v', 'w')")
    assert events(queue)[0][1] == {"id": 1, "v": "v"}
    assert scalar("select ferry_queue.maint_rotate_tables_step1('q')") == 0
    queue.execute("insert into a values (2, 'v', 'w')")
    queue.execute("insert into b values (3, 4)")
    assert scalar("select count(*) from ferry_queue.event_1_1") == 2  # the new table
    assert [e[1] for e in events(queue)] == [{"id": 2, "v": "v"}, {"x": 3, "y": 4}]
    # Re-attached with another spec: the unused function goes, in the same call.
    attach(queue, "a", key=["id"])
    assert scalar("select to_regproc(%s) is null", f"ferry_queue.{first}")
    scalar("select ferry_queue.detach_capture('q', 'b')")
    assert scalar("select to_regproc(%s) is null", f"ferry_queue.{keyless}")
    assert scalar("select count(*) from ferry_queue.capture_function") == 1  # a's plain one
    attach(queue, "b", key=[], when="x > 0")
    scalar("select ferry_queue.drop_queue('q', true)")
    assert scalar("select count(*) from pg_proc where proname ~ '^capture_[0-9]'") == 0
    assert scalar("select count(*) from pg_trigger where tgname like '\\_ferry\\_%'") == 0


def test_spec_without_key_list_or_operation_is_refused(queue: psycopg.Connection) -> None:
    queue.execute("create table t (id int)")
    with pytest.raises(psycopg.errors.RaiseException, match="has no key list"):
        attach(queue, "t")
    with pytest.raises(psycopg.errors.RaiseException, match="captures no operation"):
        attach(queue, "t", key=[], ops="")
