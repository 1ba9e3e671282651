"""Handlers that take the raw events: applyfn calls a function per event (it logs into a
table), qsplitter moves the events into a local queue read back with the queue API."""

from __future__ import annotations

import json

import pytest

from pgferry.errors import UsageError
from pgferry.handlers import HandlerError
from pgferry.queue import ticks as queue_ticks
from pgferry.queue.consumer import Consumer

LOG_FUNCTION = """
create table ev_log (n serial primary key, conf text, tick_id bigint, ev_id bigint,
                     ev_time timestamptz, ev_txid bigint, ev_retry int, ev_type text,
                     ev_data text, e1 text, e2 text, e3 text, e4 text);
create schema "Fn";
create function "Fn"."Log Event"(conf text, tick_id bigint, ev_id bigint,
    ev_time timestamptz, ev_txid bigint, ev_retry integer, ev_type text, ev_data text,
    e1 text, e2 text, e3 text, e4 text) returns void language sql as $$
    insert into public.ev_log (conf, tick_id, ev_id, ev_time, ev_txid, ev_retry, ev_type, ev_data,
                        e1, e2, e3, e4)
    values (conf, tick_id, ev_id, ev_time, ev_txid, ev_retry, ev_type, ev_data,
            e1, e2, e3, e4)
$$;
"""


@pytest.fixture
def pair(make_cascade, db_a, db_b):
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("leaf", db_b, "leaf", "root")
    c.sql("root", "create table t (id int primary key, v text)")
    c.sql("root", "create table other (id int primary key)")
    c.sql("leaf", "create table other (id int primary key)")
    c.add("root", "t", "other")
    c.add("leaf", "other", expect_sync=True)
    return c


def _changes(c) -> None:
    c.sql("root", "insert into t values (1, 'a'), (2, 'b')")
    c.sql("root", "insert into other values (1)")
    c.sql("root", "update t set v = 'a2' where id = 1")
    c.sql("root", "delete from t where id = 2")
    c.sql("root", "truncate t")
    c.sql("root", "insert into t values (3, 'c')")


def test_applyfn_calls_the_function_per_event_in_order(pair):
    c = pair
    c.sql("leaf", LOG_FUNCTION)
    args = ['func_name="Fn"."Log Event"', "func_conf=from-leaf"]
    c.add("leaf", "t", handler="applyfn", handler_args=args)
    c.catch_up("leaf")
    _changes(c)
    c.catch_up("leaf")
    rows = c.sql(
        "leaf",
        "select conf, ev_type, ev_data, e1, tick_id, ev_id, ev_retry, ev_txid > 0,"
        " ev_time is not null from ev_log order by n",
    )
    assert [r[1][:1] for r in rows] == ["I", "I", "U", "D", "R", "I"]
    assert [json.loads(r[2])["v"] if r[2] else None for r in rows] == [
        "a", "b", "a2", "b", None, "c"
    ]  # fmt: skip
    assert {r[0] for r in rows} == {"from-leaf"}
    assert {r[3] for r in rows} == {"public.t"}
    assert all(r[7] and r[8] and r[6] is None for r in rows)
    ev_ids = [r[5] for r in rows]
    assert ev_ids == sorted(ev_ids)  # called in ev_id order
    last_tick = c.sql("leaf", "select last_tick_id from ferry_node.local_state")[0][0]
    assert max(r[4] for r in rows) <= last_tick
    assert c.sql("leaf", "select * from other") == [(1,)]  # the other table as usual


def test_applyfn_bare_name_is_public(pair):
    """pgferry's sessions have no user schema on their path: a bare func_name is public's."""
    c = pair
    c.sql("leaf", LOG_FUNCTION)
    c.sql(
        "leaf",
        "create function public.log_event(text, bigint, bigint, timestamptz, bigint, integer,"
        " text, text, text, text, text, text) returns void language sql as $$"
        ' select "Fn"."Log Event"($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) $$',
    )
    c.add("leaf", "t", handler="applyfn", handler_args=["func_name=Log_Event"])
    c.catch_up("leaf")
    c.sql("root", "insert into t values (7, 'x')")
    c.catch_up("leaf")
    assert c.sql("leaf", "select ev_type, e1 from ev_log") == [("I:id", "public.t")]


def test_applyfn_needs_the_function(pair):
    c = pair
    with pytest.raises(HandlerError, match="no function nosuch"):
        c.add("leaf", "t", handler="applyfn", handler_args=["func_name=nosuch"])
    with pytest.raises(HandlerError, match="is not a function name"):
        c.add("leaf", "t", handler="applyfn", handler_args=["func_name=a.b.c"])
    with pytest.raises(UsageError, match="keeps no table: no --copy-condition"):
        c.add("leaf", "t", handler="applyfn", handler_args=["func_name=x"], copy_condition="id>1")
    assert c.sql("leaf", "select count(*) from ferry.table_info where local")[0][0] == 1


def test_qsplitter_moves_events_into_a_local_queue(pair):
    c = pair
    with pytest.raises(HandlerError, match="no queue side on this node"):
        c.add("leaf", "t", handler="qsplitter", handler_args=["queue=side"])
    c.sql("leaf", "select ferry_queue.create_queue('side')")
    with Consumer(c.dsns["leaf"], "side", "reader") as reader:
        reader.register()
        c.add("leaf", "t", handler="qsplitter", handler_args=["queue=side"])
        c.catch_up("leaf")
        _changes(c)
        c.catch_up("leaf")
        with reader.conn.transaction():
            queue_ticks.force_tick(reader.conn, "side")
            queue_ticks.tick(reader.conn, "side")
        events = []
        reader.run(lambda batch: events.extend(batch.events()))
    assert [e.ev_type[:1] for e in events] == ["I", "I", "U", "D", "R", "I"]
    assert [json.loads(e.ev_data)["v"] if e.ev_data else None for e in events] == [
        "a", "b", "a2", "b", None, "c"
    ]  # fmt: skip
    assert {e.ev_extra1 for e in events} == {"public.t"}
    assert c.sql("leaf", "select to_regclass('public.t') is null")[0][0]
