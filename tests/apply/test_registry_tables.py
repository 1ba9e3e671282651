"""add-table, remove-table, tables, missing, resync and wait-sync on real root and leaf nodes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pgferry.testing.cascade import sql_rows


@dataclass
class Nodes:
    """The root and leaf the ``cascade`` fixture made through the command line."""

    root_db: str
    leaf_db: str
    root_ini: Path
    leaf_ini: Path


sql = sql_rows


@pytest.fixture
def run(cli):
    """``run(*args)``: ``pgferry ARGS`` in-process (the ``cli`` fixture)."""
    return cli


SOURCE_DDL = """
create schema digoal_01;
create table digoal_01.user_info (userid int primary key, engname text, birthday date);
create table digoal_01.user_session (userid int primary key, logintime timestamp(0),
                                     login_count bigint default 0);
create table digoal_01.user_login_rec (userid int, login_time timestamp, ip inet);
create schema "My Schema";
create table "My Schema"."Mixed Tbl" ("Id" int primary key, "Välue" text);
create table "My Schema"."Ünïcødé" (k bigint primary key, v text);
create sequence digoal_01.seq_a;
"""


@pytest.fixture
def cascade(db_a: str, db_b: str, tmp_path: Path, run) -> Nodes:
    sql(db_a, SOURCE_DDL)

    def ini(job: str, db: str) -> Path:
        path = tmp_path / f"{job}.ini"
        path.write_text(
            f"[londiste3]\njob_name = {job}\ndb = {db}\nqueue_name = replika\n"
            f"logfile = {tmp_path}/{job}.log\n",
            encoding="utf-8",
        )
        return path

    root_ini, leaf_ini = ini("src", db_a), ini("dst", db_b)
    assert run(root_ini, "create-root", "src").code == 0
    assert run(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0
    return Nodes(db_a, db_b, root_ini, leaf_ini)


def states(connstr: str) -> dict[str, tuple]:
    rows = sql(
        connstr,
        "select table_name, merge_state, dest_table, copy_condition, copy_group,"
        " max_parallel_copy, table_attrs from ferry.table_info where local order by 1",
    )
    return {r[0]: r[1:] for r in rows}


def triggers(connstr: str, table: str) -> list[str]:
    rows = sql(
        connstr,
        "select tgname from pg_trigger where tgrelid = %s::regclass and not tgisinternal"
        " order by 1",
        (table,),
    )
    return [r[0] for r in rows]


def test_root_add_table_and_capture(cascade: Nodes, run):
    res = run(cascade.root_ini, "add-table", "digoal_01.user_info", "digoal_01.user_session")
    assert res.code == 0, res.err
    assert "Table added: digoal_01.user_info" in res.err
    assert "Table added: digoal_01.user_session" in res.err
    st = states(cascade.root_db)
    assert st["digoal_01.user_info"][0] == "ok"
    assert st["digoal_01.user_info"][3] == st["digoal_01.user_session"][3]  # one copy group
    assert triggers(cascade.root_db, "digoal_01.user_info") == [
        "_ferry_replika_capture",
        "_ferry_replika_truncate",
    ]
    sql(cascade.root_db, "insert into digoal_01.user_info values (1, 'a', '2000-01-01')")
    ev = sql(cascade.root_db, "select ev_type, ev_extra1 from ferry_queue.event")
    assert ev == [("I:userid", "digoal_01.user_info")]
    # Adding again only says so.
    again = run(cascade.root_ini, "add-table", "digoal_01.user_info")
    assert again.code == 0 and "already added" in again.err


def test_root_bad_trigger_arg_and_unknown(cascade: Nodes, run):
    res = run(
        cascade.root_ini,
        "add-table",
        "digoal_01.user_login_rec",
        "digoal_01.user_info",
        "--trigger-arg=pkey=login_time",
    )
    assert res.code == 1
    assert res.err.strip().splitlines()[-1] == (
        "pgferry: pkey=: no column login_time in table digoal_01.user_info"
    )
    assert states(cascade.root_db) == {}  # nothing half-done
    assert triggers(cascade.root_db, "digoal_01.user_login_rec") == []

    res = run(cascade.root_ini, "add-table", "digoal_01.nosuch")
    assert res.code == 1 and "Table not found: digoal_01.nosuch" in res.err


def test_root_glob_mixed_case_unicode(cascade: Nodes, run):
    res = run(cascade.root_ini, "add-table", "digoal_01.user_s*", '"My Schema".*')
    assert res.code == 0, res.err
    assert set(states(cascade.root_db)) == {
        "digoal_01.user_session",
        '"My Schema"."Mixed Tbl"',
        '"My Schema"."Ünïcødé"',
    }
    sql(cascade.root_db, """insert into "My Schema"."Mixed Tbl" values (1, 'x')""")
    ev = sql(cascade.root_db, "select ev_type, ev_extra1 from ferry_queue.event")
    assert ev == [('I:"Id"', '"My Schema"."Mixed Tbl"')]

    out = run(cascade.root_ini, "tables", "--json").out
    names = [t["table_name"] for t in json.loads(out)]
    assert names == sorted(states(cascade.root_db))

    res = run(cascade.root_ini, "remove-table", '"My Schema"."Ünïcødé"')
    assert res.code == 0, res.err
    assert '"My Schema"."Ünïcødé"' not in states(cascade.root_db)
    assert triggers(cascade.root_db, '"My Schema"."Ünïcødé"') == []


def test_root_missing_and_seqs(cascade: Nodes, run):
    run(cascade.root_ini, "add-table", "digoal_01.user_info")
    res = run(cascade.root_ini, "missing")
    assert res.code == 0
    lines = res.out.splitlines()
    assert lines[0] == "Missing objects on node"
    assert lines[1].split() == ["obj_kind", "obj_name"]
    body = [tuple(line.split(None, 1)) for line in lines[3:]]
    assert ("S", "digoal_01.seq_a") in body
    assert ("r", "digoal_01.user_login_rec") in body
    assert ("r", '"My Schema"."Mixed Tbl"') in body
    assert ("r", "digoal_01.user_info") not in body

    sql(cascade.root_db, "select setval('digoal_01.seq_a', 41)")
    assert run(cascade.root_ini, "add-seq", "digoal_01.seq_a").code == 0
    out = run(cascade.root_ini, "seqs").out.splitlines()
    assert out[0].split() == ["seq_name", "local", "last_value"]
    assert out[2].split() == ["digoal_01.seq_a", "True", "41"]

    # The leaf: set from the provider's value, created on request.
    res = run(cascade.leaf_ini, "add-seq", "digoal_01.seq_a")
    assert res.code == 1 and "use --create" in res.err
    assert run(cascade.leaf_ini, "add-seq", "--create", "digoal_01.seq_a").code == 0
    assert sql(cascade.leaf_db, "select last_value from digoal_01.seq_a") == [(41,)]
    assert run(cascade.leaf_ini, "remove-seq", "digoal_01.seq_a").code == 0
    assert sql(cascade.leaf_db, "select count(*) from ferry.seq_info") == [(0,)]


def test_leaf_add_table_variants(cascade: Nodes, run):
    res = run(cascade.root_ini, "add-table", "digoal_01.user_[is]*", '"My Schema"."Mixed Tbl"')
    assert res.code == 0, res.err
    # Not registered on the provider.
    res = run(cascade.leaf_ini, "add-table", "digoal_01.user_login_rec")
    assert res.code == 1 and "not registered on the provider" in res.err
    # Missing locally without --create.
    res = run(cascade.leaf_ini, "add-table", "digoal_01.user_info")
    assert res.code == 1 and "Table not found on local node" in res.err
    # missing on a leaf lists the provider's tables not yet local.
    out = run(cascade.leaf_ini, "missing", "--json").out
    assert {"obj_kind": "r", "obj_name": "digoal_01.user_info"} in json.loads(out)

    res = run(
        cascade.leaf_ini,
        "add-table",
        "--create",
        "digoal_01.user_info",
        "digoal_01.user_session",
        '"My Schema"."Mixed Tbl"',
        "--max-parallel-copy=2",
    )
    assert res.code == 0, res.err
    st = states(cascade.leaf_db)
    assert [v[0] for v in st.values()] == [None, None, None]  # copy pending
    assert len({v[3] for v in st.values()}) == 1  # one copy group
    assert {v[4] for v in st.values()} == {2}
    cols = sql(
        cascade.leaf_db,
        "select attname, format_type(atttypid, atttypmod) from pg_attribute"
        " where attrelid = 'digoal_01.user_session'::regclass and attnum > 0 order by attnum",
    )
    assert cols == [
        ("userid", "integer"),
        ("logintime", "timestamp(0) without time zone"),
        ("login_count", "bigint"),
    ]
    assert sql(cascade.leaf_db, """select count(*) from "My Schema"."Mixed Tbl" """) == [(0,)]
    # Direct writes on the subscriber are refused.
    with pytest.raises(psycopg.Error, match="not allowed"):
        sql(cascade.leaf_db, "insert into digoal_01.user_info values (1, 'x', null)")

    out = run(cascade.leaf_ini, "tables").out.splitlines()
    assert out[0].split() == ["table_name", "merge_state", "table_attrs"]
    assert out[2].split()[:2] == ['"My', 'Schema"."Mixed']

    res = run(cascade.leaf_ini, "resync", "digoal_01.user_info")
    assert res.code == 0, res.err
    assert run(cascade.root_ini, "resync", "digoal_01.user_info").code == 1

    # wait-sync gives up on copy-pending tables when told to.
    res = run(cascade.leaf_ini, "wait-sync", "--poll=0.05", "--timeout=0.1")
    assert res.code == 1 and "3/3 table(s) to copy" in res.err


def test_leaf_renamed_partial_table(cascade: Nodes, run):
    run(cascade.root_ini, "add-table", "digoal_01.user_info", "digoal_01.user_session")
    res = run(
        cascade.leaf_ini,
        "add-table",
        "--dest-table=digoal_02.user_info1",
        "--copy-condition=userid<1000",
        "--create",
        "digoal_01.user_info",
    )
    assert res.code == 0, res.err
    st = states(cascade.leaf_db)["digoal_01.user_info"]
    assert st[1:3] == ("digoal_02.user_info1", "userid<1000")
    assert st[5] == {"copy_condition": "userid<1000", "capture": {"key": ["userid"]}}
    out = run(cascade.leaf_ini, "tables").out
    assert "{'copy_condition': 'userid<1000', 'dest_table': 'digoal_02.user_info1'}" in out
    assert triggers(cascade.leaf_db, "digoal_02.user_info1") == [
        "_ferry_replika_capture",
        "_ferry_replika_truncate",
    ]
    # A condition the source cannot evaluate fails before anything changes.
    res = run(
        cascade.leaf_ini,
        "add-table",
        "--create",
        "--copy-condition=nosuchcol < 1",
        "--dest-table=digoal_02.user_session1",
        "digoal_01.user_session",
    )
    assert res.code == 1 and "bad --copy-condition" in res.err
    assert sql(cascade.leaf_db, "select to_regclass('digoal_02.user_session1')") == [(None,)]
    # --dest-table takes one table only.
    res = run(cascade.leaf_ini, "add-table", "--dest-table=x.y", "digoal_01.*")
    assert res.code == 2


def test_leaf_expect_sync_and_no_triggers(cascade: Nodes, run):
    run(cascade.root_ini, "add-table", "digoal_01.user_info")
    sql(cascade.leaf_db, SOURCE_DDL)
    res = run(
        cascade.leaf_ini, "add-table", "--expect-sync", "--no-triggers", "digoal_01.user_info"
    )
    assert res.code == 0, res.err
    assert states(cascade.leaf_db)["digoal_01.user_info"][0] == "ok"
    assert triggers(cascade.leaf_db, "digoal_01.user_info") == []
    res = run(cascade.leaf_ini, "wait-sync", "--poll=0.05")
    assert res.code == 0 and "All tables in sync" in res.err
    assert run(cascade.leaf_ini, "remove-table", "digoal_01.user_info").code == 0
    assert states(cascade.leaf_db) == {}
    res = run(cascade.leaf_ini, "remove-table", "digoal_01.user_info")
    assert res.code == 1 and "Table not registered" in res.err


def test_root_rejects_subscriber_options(cascade: Nodes, run):
    res = run(cascade.root_ini, "add-table", "--dest-table=a.b", "digoal_01.user_info")
    assert res.code == 2 and "branch and leaf nodes only" in res.err


def test_branch_chain_tables(new_db_a, new_db_b, tmp_path: Path, run):
    root_db, branch_db, leaf_db = new_db_a(None), new_db_b(None), new_db_a(None)
    sql(root_db, SOURCE_DDL)
    inis = {}
    for job, db in (("r", root_db), ("b", branch_db), ("l", leaf_db)):
        inis[job] = tmp_path / f"{job}.ini"
        inis[job].write_text(f"[pgferry]\njob_name = {job}\ndb = {db}\nqueue_name = q\n")
    assert run(inis["r"], "create-root", "r").code == 0
    assert run(inis["b"], "create-branch", "b", f"--provider={root_db}").code == 0
    assert run(inis["l"], "create-leaf", "l", f"--provider={branch_db}").code == 0
    assert run(inis["r"], "add-table", "digoal_01.user_info", "digoal_01.user_session").code == 0
    # The leaf reads from the branch: a table the branch has not added is not available.
    res = run(inis["l"], "add-table", "--create", "digoal_01.user_info")
    assert res.code == 1 and "not registered on the provider" in res.err
    assert run(inis["b"], "add-table", "--create", "digoal_01.user_info").code == 0
    assert run(inis["l"], "add-table", "--create", "digoal_01.user_info").code == 0
    missing = json.loads(run(inis["b"], "missing", "--json").out)
    assert missing == [{"obj_kind": "r", "obj_name": "digoal_01.user_session"}]
    assert json.loads(run(inis["l"], "missing", "--json").out) == []
    out = run(inis["l"], "status").out
    assert "Tables: 0/0/1" in out and "Tables: 2/0/0" in out


def test_add_table_gives_up_on_a_locked_table(cascade: Nodes, run):
    ini = cascade.root_ini
    ini.write_text(ini.read_text() + "lock_timeout = 0.2\n")
    # An open writer transaction holds a lock that CREATE TRIGGER must wait for.
    with psycopg.connect(cascade.root_db) as writer:
        writer.execute("lock table digoal_01.user_info in row exclusive mode")
        res = run(ini, "add-table", "digoal_01.user_info")
        writer.rollback()
    assert res.code == 1 and "lock timeout" in res.err
    assert states(cascade.root_db) == {}


def test_root_add_all_takes_tables_without_primary_key(cascade: Nodes, run):
    res = run(cascade.root_ini, "add-table", "--all")
    assert res.code == 0, res.err
    assert "Table digoal_01.user_login_rec has no key: every column identifies its rows" in (
        res.err
    )
    assert set(states(cascade.root_db)) == {
        "digoal_01.user_info",
        "digoal_01.user_login_rec",
        "digoal_01.user_session",
        '"My Schema"."Mixed Tbl"',
        '"My Schema"."Ünïcødé"',
    }
    missing = json.loads(run(cascade.root_ini, "missing", "--json").out)
    assert missing == [{"obj_kind": "S", "obj_name": "digoal_01.seq_a"}]


@pytest.mark.parametrize(
    "condition",
    [
        "true) limit 0; drop table digoal_01.z_victim; select 1 where (true",
        "true; drop table digoal_01.z_victim",
        "userid < 10 -- ) or true",
        "(userid < 10",
        "userid < 10)",
        "1 from digoal_01.z_victim",
        "true) union select 1 from digoal_01.z_victim where (true",
        "userid < 10 /* unclosed",
    ],
)
def test_copy_condition_is_one_expression(cascade: Nodes, run, condition: str):
    sql(cascade.root_db, "create table digoal_01.z_victim (id int primary key)")
    run(cascade.root_ini, "add-table", "digoal_01.user_info")
    res = run(cascade.leaf_ini, "add-table", "--create", f"--copy-condition={condition}",
              "digoal_01.user_info")  # fmt: skip
    assert res.code != 0
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
    assert sql(cascade.root_db, "select to_regclass('digoal_01.z_victim')") != [(None,)]
    assert "digoal_01.user_info" not in states(cascade.leaf_db)


def test_copy_condition_runs_read_only(cascade: Nodes, run):
    sql(cascade.root_db, "create table digoal_01.z_victim (id int primary key)")
    sql(
        cascade.root_db,
        "create function digoal_01.wipe() returns boolean language sql"
        " as 'delete from digoal_01.z_victim returning true'",
    )
    run(cascade.root_ini, "add-table", "digoal_01.user_info")
    sql(cascade.root_db, "insert into digoal_01.z_victim values (1)")
    res = run(cascade.leaf_ini, "add-table", "--create", "--copy-condition=digoal_01.wipe()",
              "digoal_01.user_info")  # fmt: skip
    assert res.code == 1 and "read-only transaction" in res.err
    assert sql(cascade.root_db, "select count(*) from digoal_01.z_victim") == [(1,)]


def test_create_full_brings_indexes_and_constraints(cascade: Nodes, run):
    sql(
        cascade.root_db,
        """
        create table digoal_01."Wide Table" (
            id int primary key, "Mail" text, amount numeric check (amount >= 0),
            code text, unique ("Mail"));
        create index "by code" on digoal_01."Wide Table" (lower(code)) where code is not null;
        create unique index on digoal_01."Wide Table" (code, id) include (amount);
        """,
    )
    run(cascade.root_ini, "add-table", 'digoal_01."Wide Table"')
    res = run(cascade.leaf_ini, "add-table", "--create-full", '--dest-table=copy."Wide Copy"',
              'digoal_01."Wide Table"')  # fmt: skip
    assert res.code == 0, res.err

    def shape(connstr: str, table: str) -> list[tuple]:
        return sql(
            connstr,
            """
            select 'i', regexp_replace(pg_get_indexdef(indexrelid), '^.* USING ', '')
              from pg_index where indrelid = %s::regclass
            union all
            select 'c', pg_get_constraintdef(oid) from pg_constraint
             where conrelid = %s::regclass and contype in ('u', 'c', 'p')
            order by 1, 2
            """,
            (table, table),
        )

    source = shape(cascade.root_db, 'digoal_01."Wide Table"')
    assert len(source) == 7  # pk, unique and partial/include indexes, 3 constraints
    assert shape(cascade.leaf_db, 'copy."Wide Copy"') == source
    # --create alone makes the columns and the primary key only.
    res = run(cascade.leaf_ini, "add-table", "--create", '--dest-table=copy."Plain Copy"',
              "--force", 'digoal_01."Wide Table"')  # fmt: skip
    assert res.code == 0, res.err
    assert [k for k, _ in shape(cascade.leaf_db, 'copy."Plain Copy"')] == ["c", "i"]


def test_piped_output_is_neither_wrapped_nor_coloured(cascade: Nodes, run):
    import subprocess
    import sys

    long_name = "digoal_02.a_destination_table_with_a_name_long_enough_to_pass_eighty_cols"
    run(cascade.root_ini, "add-table", "digoal_01.user_info")
    condition = "--copy-condition=userid < 1000 and engname is not null"
    res = run(cascade.leaf_ini, "add-table", "--create", f"--dest-table={long_name}",
              condition, "digoal_01.user_info")  # fmt: skip
    assert res.code == 0, res.err
    env = {"COLUMNS": "40", "TERM": "xterm-256color", "FORCE_COLOR": "", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "pgferry", str(cascade.leaf_ini), "tables"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    row = next(line for line in lines if line.startswith("digoal_01.user_info"))
    assert long_name in row and "engname is not null" in row  # one row, one line
    assert len(row) > 80 and "\x1b[" not in proc.stdout
