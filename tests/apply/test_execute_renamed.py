"""Walkthrough items 19-21: a queued DDL script reaches a renamed, partial leaf under its
local names, skips what the leaf does not replicate, and never jams the queue."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgferry.cli.main import main
from pgferry.node import tableops

ROOT_SCHEMA = """
create schema digoal_01;
create table digoal_01.user_info (userid int primary key, engname text);
create table digoal_01.user_session (userid int primary key, login_count bigint default 0);
"""
ADD_COLUMN = """BEGIN;
alter table digoal_01.user_info add column c1 int;
alter table digoal_01.user_session add column c1 int;
END;
"""


@pytest.mark.parametrize("spark_path", [False, True], ids=["driver", "spark"])
def test_script_reaches_renamed_partial_leaf(make_pair, tmp_path: Path, spark_path: bool) -> None:
    pair = make_pair(replay_local_events="0" if spark_path else "100000")
    pair.root(ROOT_SCHEMA)
    pair.root(
        "insert into digoal_01.user_info select g, 'u' || g from generate_series(1, 2000) g;"
        "insert into digoal_01.user_session (userid) select generate_series(1, 2000);"
    )
    pair.leaf("create schema digoal_02")
    with psycopg.connect(pair.root_dsn) as conn:
        tableops.add_tables(
            pair.root_cfg,
            conn,
            ["digoal_01.user_info", "digoal_01.user_session"],
            tableops.AddTableOptions(),
        )
    # The leaf takes only user_info, renamed and partial.
    with psycopg.connect(pair.leaf_dsn) as conn:
        tableops.add_tables(
            pair.leaf_cfg,
            conn,
            ["digoal_01.user_info"],
            tableops.AddTableOptions(
                dest_table="digoal_02.user_info1", copy_condition="userid<1000", create=True
            ),
        )
    worker = pair.worker()
    if spark_path:  # up, as after a copy of tables too large for the driver
        worker.replay.spark.get()
    pair.catch_up(worker)
    script = tmp_path / "add_column.sql"
    script.write_text(ADD_COLUMN)
    assert main([str(pair.root_cfg.path), "execute", str(script)]) == 0
    pair.catch_up(worker)  # the script alone; the rows below come in later batches
    pair.root("update digoal_01.user_info set c1 = userid * 2 where userid % 7 = 0")
    pair.root("insert into digoal_01.user_info values (5, 'five', 55) on conflict do nothing")
    pair.root("update digoal_01.user_session set c1 = 1")
    pair.catch_up(worker)

    cols = pair.leaf(
        "select attname from pg_attribute where attrelid = 'digoal_02.user_info1'::regclass"
        " and attnum > 0 and not attisdropped order by attnum"
    )
    assert [c[0] for c in cols] == ["userid", "engname", "c1"]
    rows = "select userid, engname, c1 from {} where userid < 1000 order by userid"
    assert pair.leaf(rows.format("digoal_02.user_info1")) == pair.root(
        rows.format("digoal_01.user_info")
    )
    assert pair.leaf("select count(*), sum(c1) from digoal_02.user_info1") == pair.root(
        "select count(*), sum(c1) from digoal_01.user_info where userid < 1000"
    )
    assert pair.leaf("select to_regclass('digoal_01.user_session')") == [(None,)]
    state = pair.leaf("select cur_error, last_tick_id from ferry_node.local_state")
    assert state[0][0] is None
    assert pair.leaf("select file_name from ferry.applied_execute") == [("add_column.sql",)]
