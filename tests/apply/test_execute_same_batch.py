"""Rows changed right after a queued ADD COLUMN, in the same batch as the script, keep the
new column's values (the source's column list is read again after the script)."""

from __future__ import annotations

import psycopg

from pgferry.scripts.execute import Script, execute_on_root


def test_rows_after_script_in_same_batch_keep_new_column(pair) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.root("insert into t select g, g from generate_series(1, 100) g")
    pair.add_tables("public.t")
    worker = pair.catch_up()
    pair.root("update t set v = v + 1")  # a batch that fills the worker's column caches
    pair.catch_up(worker)
    with psycopg.connect(pair.root_dsn) as conn:
        execute_on_root(conn, pair.queue, [Script.from_text("c.sql", "alter table t add c int")])
    pair.root("update t set c = id * 3")
    pair.catch_up(worker)  # script and updates in one batch
    q = "select count(c), sum(c) from t"
    assert pair.leaf(q) == pair.root(q) == [(100, 15150)]
