"""Queued scripts (EXECUTE events) replay as barriers between the row changes around them."""

from __future__ import annotations

import psycopg

from pgferry.scripts.execute import Script, execute_on_root


def test_script_runs_between_rows(pair) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t")
    worker = pair.catch_up()
    pair.root("insert into t values (1, 1), (2, 2)")
    pair.root("update t set v = 20 where id = 2")
    script = Script.from_text(
        "add_column.sql",
        "alter table public.t add column c int; update public.t set c = id * 10;",
    )
    with psycopg.connect(pair.root_dsn) as conn:
        execute_on_root(conn, pair.queue, [script])
    pair.root("insert into t values (3, 3, 33)")
    pair.root("update t set c = -1 where id = 1")
    pair.catch_up(worker)  # all of it in one batch: rows, script, rows
    q = "select t::text from t order by id"
    assert pair.leaf(q) == pair.root(q)
    assert pair.leaf("select c from t where id = 2") == [(20,)]
    assert pair.leaf("select count(*) from ferry.applied_execute") == [(1,)]
