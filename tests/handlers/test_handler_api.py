"""The handler API end to end: show-handlers, bad arguments, vtable, change-handler, and
third-party handlers loaded through handler_modules (a column expression in copy and
replay; an events handler that sees every event, TRUNCATE included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgferry.handlers import registry as handler_registry
from tests.fixtures.fix_cli import one_error

HERE = Path(__file__).parent


@pytest.fixture
def sample_modules(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """handler_modules naming the sample module, importable from this directory."""
    monkeypatch.syspath_prepend(str(HERE))
    yield {"handler_modules": "sample_handlers"}
    handler_registry.forget_modules()


_one_error = one_error


def test_show_handlers_lists_builtin_and_third_party(make_cascade, db_a, sample_modules):
    c = make_cascade(**sample_modules)
    c.node("root", db_a, "root")
    listed = c.cli("root", "show-handlers")
    assert listed.code == 0
    lines = {line.split()[0]: line for line in listed.out.splitlines()[2:]}
    assert {"bulk", "vtable", "upper_col", "event_log"} <= set(lines)
    assert "upsert" in lines["bulk"]
    assert "column" in lines["upper_col"] and "module sample_handlers" in lines["upper_col"]
    assert "log_table every=1" in lines["event_log"]
    one = c.cli("root", "show-handlers", "event_log")
    assert one.code == 0
    assert "Append every event" in one.out and "every" in one.out and "int" in one.out
    data = json.loads(c.cli("root", "show-handlers", "--json").out)
    by_name = {h["name"]: h for h in data}
    assert by_name["vtable"]["needs_table"] is False
    assert by_name["vtable"]["aliases"] == ["fake_local"]
    assert by_name["event_log"]["mode"] == "events"
    assert by_name["event_log"]["arguments"][1] == {
        "name": "every",
        "type": "int",
        "default": 1,
        "required": False,
        "choices": [],
        "aliases": [],
        "doc": "keep only events whose ev_id is a multiple of this",
    }
    assert "unknown handler: nosuch" in _one_error(c.cli("root", "show-handlers", "nosuch"))


def test_bad_handler_arguments_fail_at_add_table(make_cascade, db_a, db_b, sample_modules):
    c = make_cascade(**sample_modules)
    c.node("root", db_a, "root")
    c.node("leaf", db_b, "leaf", "root")
    for dsn in (db_a, db_b):
        c.sql("root" if dsn == db_a else "leaf", "create table t (id int primary key, v text)")
    c.add("root", "t")
    cases = [
        (["--handler=nosuch"], "unknown handler: nosuch"),
        (["--handler=upper_col", "--handler-arg=colum=v"], "has no argument colum"),
        (["--handler=upper_col", "--handler-arg=column=v", "--handler-arg=column=w"],
         "argument column given twice"),
        (["--handler=event_log", "--handler-arg=log_table=x", "--handler-arg=every=often"],
         "every must be an integer, not 'often'"),
        (["--handler=event_log", "--handler-arg=log_table=x", "--handler-arg=every=0"],
         "every must be at least 1"),
        (["--handler=event_log"], "needs argument log_table"),
        (["--handler=upper_col", "--handler-arg=column"], "expected NAME=VALUE"),
        (["--handler-arg=column=v"], "--handler-arg needs --handler"),
        (["--handler=upper_col", "--handler-arg=column=nope"], "has no column nope"),
    ]  # fmt: skip
    for args, message in cases:
        line = _one_error(c.cli("leaf", "add-table", "t", *args))
        assert message in line, (args, line)
        assert c.sql("leaf", "select count(*) from ferry.table_info where local")[0][0] == 0
    # On a root only handlers that make sense there.
    line = _one_error(c.cli("root", "add-table", "t", "--force", "--handler=upper_col",
                            "--handler-arg=column=v"))  # fmt: skip
    assert "for branch and leaf nodes only" in line


def test_third_party_handlers_copy_and_replay(make_cascade, db_a, db_b, sample_modules):
    c = make_cascade(**sample_modules)
    c.node("root", db_a, "root")
    c.node("leaf", db_b, "leaf", "root")
    c.sql("root", "create table t (id int primary key, name text, note text)")
    c.sql("root", "create table e (id int primary key, v text)")
    c.sql("leaf", "create table t (id int primary key, name text, note text)")
    c.sql("leaf", "create table log (tick_id bigint, ev_id bigint, ev_type text, ev_data text)")
    c.add("root", "t", "e")
    c.sql("root", "insert into t select g, 'name ' || g, 'n' from generate_series(1, 50) g")
    c.add("leaf", "t", handler="upper_col", handler_args=["column=name"])
    c.add("leaf", "e", handler="event_log", handler_args=["log_table=public.log"])
    c.catch_up("leaf")
    rows = c.sql("leaf", "select id, name, note from t order by id")
    assert rows == [(i, f"NAME {i}", "n") for i in range(1, 51)]  # the copy
    c.sql("root", "update t set name = 'changed ' || id where id <= 5")
    c.sql("root", "insert into t values (51, 'new one', 'x')")
    c.sql("root", "insert into e values (1, 'a'), (2, 'b')")
    c.sql("root", "update e set v = 'c' where id = 1")
    c.sql("root", "truncate e")
    c.sql("root", "insert into e values (3, 'd')")
    c.catch_up("leaf")
    want = [(i, f"CHANGED {i}" if i <= 5 else f"NAME {i}", "n") for i in range(1, 51)]
    want.append((51, "NEW ONE", "x"))
    assert c.sql("leaf", "select id, name, note from t order by id") == want
    logged = c.sql("leaf", "select ev_type, ev_data::json->>'v' from log order by ev_id")
    assert [t[:1] for t, _ in logged] == ["I", "I", "U", "R", "I"]
    assert [v for _, v in logged] == ["a", "b", "c", None, "d"]
    assert c.sql("leaf", "select to_regclass('public.e') is null")[0][0]  # no table needed
    ids = c.sql("leaf", "select ev_id from log order by ev_id")
    assert ids == sorted(ids)
    shown = c.cli("leaf", "tables", "--json")
    attrs = {t["table_name"]: t["table_attrs"] for t in json.loads(shown.out)}
    assert attrs["public.t"]["handler"] == "upper_col"
    assert attrs["public.t"]["handler_args"] == {"column": "name"}
    assert attrs["public.e"]["handler"] == "event_log"


def test_vtable_on_leaf_and_branch(make_cascade, db_a, db_b, new_db_b):
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("branch", db_b, "branch", "root")
    c.node("leaf", new_db_b(None), "leaf", "branch")
    for node in ("root", "branch", "leaf"):
        c.sql(node, "create table a (id int primary key, v text)")
    c.sql("root", "create table b (id int primary key, v text)")
    c.sql("leaf", "create table b (id int primary key, v text)")
    c.add("root", "a", "b")
    c.sql("root", "insert into b values (1, 'before')")
    c.add("branch", "a", expect_sync=True)
    c.add("branch", "b", handler="vtable")  # no table on the branch
    c.add("leaf", "a", expect_sync=True)
    # The branch keeps no rows of b: nothing to copy from, said at once.
    with pytest.raises(Exception, match="keeps no rows of it .handler vtable."):
        c.add("leaf", "b")
    c.add("leaf", "b", expect_sync=True)
    c.sql("root", "insert into a values (1, 'x'), (2, 'y')")
    c.sql("root", "insert into b values (2, 'after'), (3, 'after')")
    c.sql("root", "update b set v = 'changed' where id = 1")
    c.catch_up("branch", "leaf")
    assert c.sql("leaf", "select * from a order by id") == [(1, "x"), (2, "y")]
    assert c.sql("branch", "select * from a order by id") == [(1, "x"), (2, "y")]
    # Forwarded through the vtable branch unchanged (id 1 was never copied: expect-sync).
    assert c.sql("leaf", "select * from b order by id") == [
        (1, "changed"), (2, "after"), (3, "after")
    ]  # fmt: skip
    assert c.sql("branch", "select to_regclass('public.b') is null")[0][0]
    shown = c.cli("branch", "tables")
    line = next(x for x in shown.out.splitlines() if x.startswith("public.b"))
    assert "'handler': 'vtable'" in line and "ok" in line


def test_change_handler(make_cascade, db_a, db_b, sample_modules):
    c = make_cascade(**sample_modules)
    c.node("root", db_a, "root")
    c.node("leaf", db_b, "leaf", "root")
    for node in ("root", "leaf"):
        c.sql(node, "create table t (id int primary key, name text)")
    c.add("root", "t")
    c.add("leaf", "t", expect_sync=True)
    c.sql("root", "insert into t values (1, 'one')")
    c.catch_up("leaf")
    done = c.cli("leaf", "change-handler", "t", "--handler=upper_col", "--handler-arg=column=name")
    assert done.code == 0, done.err
    assert "resync" in done.err  # the rows here were chosen by the old handler
    again = c.cli("leaf", "change-handler", "t", "--handler=upper_col",
                  "--handler-arg=column=name")  # fmt: skip
    assert again.code == 0 and "unchanged" in again.err
    c.sql("root", "insert into t values (2, 'two')")
    c.catch_up("leaf")
    assert c.sql("leaf", "select * from t order by id") == [(1, "one"), (2, "TWO")]
    line = _one_error(c.cli("leaf", "change-handler", "t", "--handler=vtable"))
    assert "remove-table and add-table it again" in line
    line = _one_error(c.cli("leaf", "change-handler", "nosuch", "--handler=bulk"))
    assert "not added on this node: nosuch" in line


def test_handlers_of_installed_packages(tmp_path, monkeypatch, write_ini, cli):
    """Entry points of group pgferry.handlers: a class, and one that fails to load (a
    warning; its handler is missing, the others are there)."""
    (tmp_path / "ep_sample.py").write_text(
        "from pgferry.handlers import Handler\n"
        "class Noop(Handler):\n"
        '    """Do nothing, from a package."""\n'
        '    name = "ep_noop"\n'
    )
    info = tmp_path / "ep_sample-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-sample\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[pgferry.handlers]\nep_noop = ep_sample:Noop\nbroken = ep_sample:Missing\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(handler_registry, "_known", None)
    ini = write_ini("eps", "dbname=unused")
    shown = cli(ini, "show-handlers")
    assert shown.code == 0, shown.err
    line = next(x for x in shown.out.splitlines() if x.startswith("ep_noop"))
    assert "Do nothing, from a package." in line and "entry point ep_noop (ep-sample)" in line
    assert "broken" in shown.err and "not loaded" in shown.err
    monkeypatch.setattr(handler_registry, "_known", None)  # forget the package's handler
