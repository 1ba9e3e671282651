"""``execute``: scripts run once on the root, are queued, refused where unsafe."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgferry.cli.main import main
from pgferry.errors import NodeError, PgferryError
from pgferry.scripts.execute import Script, execute_on_root, load_script

ADD_COLUMN = """BEGIN;
alter table digoal_01.user_info add column c1 int;
END;
"""


def _prepare(pair) -> None:
    for run in (pair.root, pair.leaf):
        run("create schema if not exists digoal_01")
        run("create table digoal_01.user_info (userid int primary key, engname text)")
    pair.add_tables("digoal_01.user_info")


def _queued_scripts(pair) -> list[tuple]:
    return pair.root(
        "select e.ev_extra1, e.ev_extra3 from ferry_queue.event e"
        " join ferry_queue.queue q on e.ev_part / 10 = q.queue_id"
        " where q.queue_name = %s and e.ev_type = 'EXECUTE'",
        (pair.queue,),
    )


def test_execute_runs_on_root_once_and_queues(pair, tmp_path: Path, capsys) -> None:
    _prepare(pair)
    script = tmp_path / "add_column.sql"
    script.write_text(ADD_COLUMN)
    assert main([str(pair.root_cfg.path), "execute", str(script)]) == 0
    assert "executed and queued" in capsys.readouterr().out
    cols = pair.root(
        "select attname from pg_attribute where attrelid = 'digoal_01.user_info'::regclass"
        " and attnum > 0 and not attisdropped order by attnum"
    )
    assert [c[0] for c in cols] == ["userid", "engname", "c1"]
    queued = _queued_scripts(pair)
    assert [q[0] for q in queued] == ["add_column.sql"]

    assert main([str(pair.root_cfg.path), "execute", str(script)]) == 0
    assert "already executed" in capsys.readouterr().out
    assert len(_queued_scripts(pair)) == 1

    script.write_text(ADD_COLUMN.replace("c1", "c2"))
    assert main([str(pair.root_cfg.path), "execute", str(script)]) != 0
    assert "different script with this name" in capsys.readouterr().err


def test_rows_changed_by_a_script_are_not_captured_twice(pair, tmp_path: Path) -> None:
    _prepare(pair)
    pair.root("insert into digoal_01.user_info values (1, 'a'), (2, 'b')")
    script = tmp_path / "fix_names.sql"
    script.write_text("update digoal_01.user_info set engname = upper(engname);")
    assert main([str(pair.root_cfg.path), "execute", str(script)]) == 0
    assert pair.root("select engname from digoal_01.user_info order by 1") == [("A",), ("B",)]
    updates = pair.root(
        "select count(*) from ferry_queue.event e join ferry_queue.queue q"
        " on e.ev_part / 10 = q.queue_id where q.queue_name = %s and e.ev_type like 'U:%%'",
        (pair.queue,),
    )
    assert updates == [(0,)]


def test_execute_on_leaf_is_refused(pair, tmp_path: Path) -> None:
    _prepare(pair)
    with psycopg.connect(pair.leaf_dsn) as conn, pytest.raises(NodeError) as err:
        execute_on_root(conn, pair.queue, [Script.from_text("x.sql", "select 1")])
    assert str(err.value) == f"Node is not root node: {pair.queue}"


def test_unsafe_script_changes_nothing(pair, tmp_path: Path) -> None:
    _prepare(pair)
    good = Script.from_text("a.sql", "alter table digoal_01.user_info add column ok int;")
    bad = Script.from_text("b.sql", "DO $$ begin execute 'drop table digoal_01.user_info'; end $$")
    with psycopg.connect(pair.root_dsn) as conn, pytest.raises(PgferryError, match="DoStmt"):
        execute_on_root(conn, pair.queue, [good, bad])
    assert pair.root("select to_regclass('digoal_01.user_info') is not null")[0][0]
    assert not pair.root(
        "select 1 from pg_attribute where attrelid = 'digoal_01.user_info'::regclass"
        " and attname = 'ok'"
    )
    assert _queued_scripts(pair) == []


def test_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PgferryError, match="SQL file not found"):
        load_script(tmp_path / "nope.sql")
