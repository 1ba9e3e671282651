"""capture-ddl under load, against a failing leaf, during a copy, and without a superuser."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from pgferry.apply.worker import Worker
from pgferry.scripts.skip import EventFailed
from pgferry.testing.cascade import Cascade
from pgferry.testing.load import Inserts, Load
from tests.scripts.test_ddl_capture import _columns, three  # noqa: F401 - the fixture

ROWS = "select id, v, c from {} where {} order by id"


def _fails(worker: Worker) -> bool:
    """One loop of ``worker``; True when it stopped at a failing event (recorded as the
    daemon records it)."""
    try:
        worker.work()
    except EventFailed as exc:
        worker.on_error(exc)
        return True
    return False


def test_failing_ddl_stops_one_leaf_then_skip_event(three: Cascade) -> None:  # noqa: F811
    c = three
    c.sql("full", "create index t_v on app.t (v)")  # the DBA was there first
    assert c.cli("root", "capture-ddl", "on").code == 0
    with Inserts(c.dsns["root"], sql.Identifier("app", "t"), 1000, every=0.01) as load:
        c.wait_for(lambda: load.done > 20)
        c.sql("root", "alter table app.t add column c int default 3")
        c.sql("root", "create index t_v on app.t (v, c)")
        c.wait_for(lambda: load.done > 60)
    c.sql("root", "update app.t set c = id where id % 5 = 0")
    c.catch_up("part")
    target = c.tick()
    c.wait_for(lambda: _fails(c.worker("full")), what="the full leaf stopping at the DDL")
    status = c.cli("root", "status")
    assert "create index t_v on app.t (v, c)" in status.out and "already exists" in status.out
    assert c.last_tick("full") < target
    skipped = c.cli("full", "skip-event", "--yes")
    assert skipped.code == 0 and "create index t_v on app.t (v, c)" in skipped.out
    c.catch_up("full", "part")
    assert c.sql("full", ROWS.format("app.t", "true")) == c.sql(
        "root", ROWS.format("app.t", "true")
    )
    assert c.sql("part", ROWS.format("part.t1", "true")) == c.sql(
        "root", ROWS.format("app.t", "id < 100")
    )


@pytest.mark.slow
def test_column_added_while_a_table_is_copied(three: Cascade) -> None:  # noqa: F811
    c = three
    c.sql("root", "create table app.big (id int primary key, v text)")
    c.sql("root", "insert into app.big select g, 'b' || g from generate_series(1, 60000) g")
    c.sql("full", "create table app.big (id int primary key, v text)")
    c.add("root", "app.big")
    assert c.cli("root", "capture-ddl", "on").code == 0

    def write(conn: psycopg.Connection, done: int) -> None:
        conn.execute("update app.big set v = v || '.' where id = %s", (done * 7 % 60000 + 1,))
        conn.execute("insert into app.big (id, v) values (%s, 'new')", (100000 + done,))

    with Load(c.dsns["root"], write, every=0.005) as load:
        c.add("full", "app.big")
        c.worker("full").work()  # the copy starts beside the loop
        c.wait_for(lambda: load.done > 20)
        state = c.sql(
            "full", "select merge_state from ferry.table_info where table_name = 'app.big'"
        )
        c.sql("root", "alter table app.big add column c int default 7")
        c.wait_for(lambda: load.done > 60)
        c.sql("root", "update app.big set c = id % 100 where id % 1000 = 0")
        c.wait_for(lambda: load.done > 100)
    c.catch_up("full", "part")
    assert _columns(c, "full", "app.big") == ["id", "v", "c"]
    q = "select id, v, c from app.big order by id"
    assert c.sql("full", q) == c.sql("root", q)
    assert state != [("ok",)], "the column must come while the copy runs"
    with c.running("full", "part"):
        compared = c.cli("full", "compare")
    assert compared.code == 0 and "do not match" not in compared.out, compared.out + compared.err


def test_refused_without_a_superuser(make_cascade, new_db_a) -> None:
    c = make_cascade()
    c.node("root", new_db_a(), "root")
    c.sql("root", "drop role if exists ddl_plain; create role ddl_plain login")
    try:
        ini = c.paths["root"]
        text = ini.read_text()
        ini.write_text(
            text.replace(c.dsns["root"], c.dsns["root"].replace("user=postgres", "user=ddl_plain"))
        )
        result = c.cli("root", "capture-ddl", "on")
        ini.write_text(text)
    finally:
        c.sql("root", "drop role ddl_plain")
    assert result.code != 0
    assert result.err.strip() == (
        "pgferry: capture-ddl on: event triggers need a superuser; role ddl_plain is not one"
    )
    assert c.sql("root", "select count(*) from ferry.ddl_capture") == [(0,)]
    assert c.sql("root", "select count(*) from pg_event_trigger") == [(0,)]
