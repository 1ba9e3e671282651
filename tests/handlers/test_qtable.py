"""qtable: a root table whose inserts are queued, never stored; a subscriber with qtable
ignores them, one with the default handler (and --expect-sync) stores them."""

from __future__ import annotations

import pytest

from pgferry.errors import TableError


def test_qtable_rows_live_in_the_queue(make_cascade, db_a, db_b, new_db_b):
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("ignore", db_b, "leaf", "root")
    c.node("store", new_db_b(None), "leaf", "root")
    c.sql("root", "create table q (id int primary key, payload text)")
    c.sql("root", "create table t (id int primary key)")
    c.sql("store", "create table q (id int primary key, payload text)")
    for node in ("ignore", "store"):
        c.sql(node, "create table t (id int primary key)")
    with pytest.raises(TableError, match="Table not found"):
        c.add("root", "nosuch", handler="qtable")
    c.add("root", "q", handler="qtable")
    c.add("root", "t")
    c.add("ignore", "q", handler="qtable")
    c.add("ignore", "t", expect_sync=True)
    with pytest.raises(TableError, match="keeps no rows of it .handler qtable.*--expect-sync"):
        c.add("store", "q")
    c.add("store", "q", expect_sync=True)
    c.add("store", "t", expect_sync=True)
    c.catch_up("ignore", "store")
    c.sql("root", "insert into q values (1, 'one'), (2, 'two')")
    c.sql("root", "insert into t values (1)")
    c.sql("root", "insert into q values (3, 'three')")
    c.catch_up("ignore", "store")
    assert c.sql("root", "select count(*) from q") == [(0,)]  # queued, never stored
    queued = c.sql("root", "select count(*) from ferry_queue.event where ev_extra1 = 'public.q'")
    assert queued == [(3,)]
    assert c.sql("store", "select * from q order by id") == [(1, "one"), (2, "two"), (3, "three")]
    assert c.sql("ignore", "select to_regclass('public.q') is null") == [(True,)]
    for node in ("ignore", "store"):
        assert c.sql(node, "select * from t") == [(1,)]
    attrs = c.sql("root", "select table_attrs from ferry.table_info where table_name = 'public.q'")
    assert attrs[0][0]["handler"] == "qtable"
    assert attrs[0][0]["capture"]["skip"] is True
    assert attrs[0][0]["capture"]["ops"] == "I"
    # change-handler on the root makes the capture again: t becomes queue-only, q stores.
    done = c.cli("root", "change-handler", "t", "--handler=qtable")
    assert done.code == 0, done.err
    back = c.cli("root", "change-handler", "q", "--handler=bulk")
    assert back.code == 0, back.err
    c.sql("root", "insert into t values (2)")
    c.sql("root", "insert into q values (4, 'four')")
    assert c.sql("root", "select * from t") == [(1,)]
    assert c.sql("root", "select id from q") == [(4,)]
    c.catch_up("ignore", "store")
    for node in ("ignore", "store"):
        assert c.sql(node, "select * from t order by id") == [(1,), (2,)]
    assert c.sql("store", "select id from q order by id") == [(1,), (2,), (3,), (4,)]
    refused = c.cli("root", "change-handler", "t", "--handler=vtable")
    assert refused.code != 0 and "only one of qtable and vtable captures" in refused.err
