"""capture-ddl: a root's DDL on replicated tables reaches a full leaf and a renamed partial
leaf, translated, between the right rows; what cannot be isolated is refused on the root."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from pgferry.testing.cascade import Cascade
from tests.fixtures.fix_cascade import TABLE_ID

ROOT_SCHEMA = """
create schema app;
create table app.t (id int primary key, v text);
create table app.other (id int primary key, w text);
create table public.plain (id int primary key, v text);
"""


def _columns(cascade: Cascade, node: str, table: str) -> list[str]:
    return [
        r[0]
        for r in cascade.sql(
            node,
            "select attname::text from pg_attribute where attrelid = %s::regclass"
            " and attnum > 0 and not attisdropped order by attnum",
            (table,),
        )
    ]


@pytest.fixture
def three(make_cascade, new_db_a, new_db_b) -> Cascade:
    """root (A) -> full leaf (B) and a partial leaf (B) with app.t as part.t1 (id < 100)."""
    c = make_cascade()
    c.node("root", new_db_a(), "root")
    c.node("full", new_db_b(), "leaf", "root")
    c.node("part", new_db_b(), "leaf", "root")
    c.sql("root", ROOT_SCHEMA)
    c.sql("root", "insert into app.t select g, 'v' || g from generate_series(1, 200, 2) g")
    c.sql("full", ROOT_SCHEMA)
    c.sql("part", "create schema part")
    c.add("root", "app.t", "app.other", "public.plain")
    c.add("full", "app.t", "app.other", "public.plain")
    c.add("part", "app.t", dest_table="part.t1", copy_condition="id < 100", create=True)
    c.catch_up("full", "part")
    return c


def test_statement_kinds_reach_full_and_renamed_partial_leaf(three: Cascade) -> None:
    c = three
    assert c.cli("root", "capture-ddl", "on").code == 0
    root = c.dsns["root"]
    with psycopg.connect(root, autocommit=True) as conn:
        conn.execute("alter table app.t add column c1 int")
        conn.execute("insert into app.t values (201, 'a', 1), (50, 'b', 2)")
        # A multi-statement query: only the ALTER is queued, the rows travel as rows.
        conn.execute(
            "update app.t set c1 = id where id < 10; alter table app.t add column c2 text"
            " default 'x'; insert into app.t values (202, 'c', 3, 'y'), (60, 'd', 4, 'z')"
        )
        # DDL and DML in one transaction.
        with conn.transaction():
            conn.execute("insert into app.t values (70, 'e', 5)")
            conn.execute("alter table app.t alter column c1 type bigint")
            conn.execute("update app.t set c1 = c1 * 1000 where id = 70")
        # A DO block and a PL/pgSQL function: the statement they ran.
        conn.execute("do $$ begin execute 'alter table app.t alter column c2 set not null'; end $$")
        conn.execute(
            "create function public.add_c3() returns void language plpgsql as"
            " $f$ begin alter table app.t add column c3 int default 7; end $f$"
        )
        conn.execute("select public.add_c3()")
        conn.execute("comment on column app.t.c2 is 'second'")
        conn.execute("create index t_c1 on app.t (c1)")
        conn.execute("alter table app.t drop column c3")
        conn.execute("alter table app.t add constraint c1_pos check (c1 >= 0)")
        conn.execute("alter table app.t rename column v to v2")
        conn.execute("insert into app.t (id, v2, c1, c2) values (80, 'f', 6, 'w')")
        # DDL on a table nobody replicates is left alone.
        conn.execute("create table public.local_only (id int)")
        conn.execute("alter table public.local_only add column x int")
    c.catch_up("full", "part")
    expected = ["id", "v2", "c1", "c2"]
    assert _columns(c, "root", "app.t") == expected
    assert _columns(c, "full", "app.t") == expected
    assert _columns(c, "part", "part.t1") == expected
    q = "select id, v2, c1, c2 from {} where {} order by id"
    assert c.sql("full", q.format("app.t", "true")) == c.sql("root", q.format("app.t", "true"))
    assert c.sql("part", q.format("part.t1", "true")) == c.sql(
        "root", q.format("app.t", "id < 100")
    )
    for node, table in (("full", "app.t"), ("part", "part.t1")):
        assert c.sql(
            node,
            "select col_description(attrelid, attnum) from pg_attribute"
            f" where attrelid = '{table}'::regclass and attname = 'c2'",
        ) == [("second",)]
        assert c.sql(node, "select count(*) from pg_indexes where indexname = 't_c1'") == [(1,)]
        assert c.sql(node, "select attnotnull from pg_attribute where attname = 'c2'"
                     f" and attrelid = '{table}'::regclass") == [(True,)]  # fmt: skip
    assert c.sql("full", "select count(*) from pg_class where relname = 'local_only'") == [(0,)]

    # DROP INDEX runs where the table is replicated.
    c.sql("root", "drop index app.t_c1")
    c.catch_up("full", "part")
    assert c.sql("full", "select count(*) from pg_indexes where indexname = 't_c1'") == [(0,)]


def test_rename_follows_in_registry_everywhere(three: Cascade) -> None:
    c = three
    assert c.cli("root", "capture-ddl", "on").code == 0
    c.sql("root", "insert into app.t values (300, 'before'), (30, 'before')")
    c.sql("root", "alter table app.t rename to t_new")
    c.sql("root", "insert into app.t_new values (301, 'after'), (32, 'after')")
    c.catch_up("full", "part")
    reg = "select table_name, dest_table from ferry.table_info where queue_name = %s and local"
    assert ("app.t_new", None) in c.sql("root", reg, (c.queue,))
    assert ("app.t_new", None) in c.sql("full", reg, (c.queue,))
    assert c.sql("part", reg, (c.queue,)) == [("app.t_new", "part.t1")]
    q = "select id, v from {} where {} order by id"
    assert c.sql("full", q.format("app.t_new", "true")) == c.sql(
        "root", q.format("app.t_new", "true")
    )
    assert c.sql("part", q.format("part.t1", "true")) == c.sql(
        "root", q.format("app.t_new", "id < 100")
    )
    # Another schema (which CREATE SCHEMA does not bring: made on the full leaf by hand).
    for node in ("root", "full"):
        c.sql(node, "create schema app2")
    c.sql("root", "alter table app.t_new set schema app2")
    c.sql("root", "insert into app2.t_new values (302, 'moved'), (34, 'moved')")
    c.catch_up("full", "part")
    assert ("app2.t_new", None) in c.sql("full", reg, (c.queue,))
    assert c.sql("part", reg, (c.queue,)) == [("app2.t_new", "part.t1")]
    assert c.sql("full", q.format("app2.t_new", "true")) == c.sql(
        "root", q.format("app2.t_new", "true")
    )
    assert c.sql("part", q.format("part.t1", "true")) == c.sql(
        "root", q.format("app2.t_new", "id < 100")
    )


def test_refused_on_root_with_one_line(three: Cascade) -> None:
    c = three
    assert c.cli("root", "capture-ddl", "on").code == 0
    refusals = {
        # Two statements on the same table in one query: which one is which is not known.
        "alter table app.t add column a int; alter table app.t add column b int": "cannot tell",
        # An SQL-language function does not show its statements.
        "create function public.f() returns void language sql as"
        " $$ alter table app.t add column a int $$; select public.f()": "inside SQL function",
        # A volatile default fills existing rows differently on every node.
        "alter table app.t add column r float default random()": "values of its own",
        "alter table app.t add column s serial": "values of its own",
        # Unqualified names are read as public by subscribers.
        "set search_path = app, public; alter table t add column a int": "with its schema",
    }
    for query, words in refusals.items():
        with (
            psycopg.connect(c.dsns["root"], autocommit=True) as conn,
            pytest.raises(psycopg.Error) as failure,
        ):
            conn.execute(query)
        assert words in str(failure.value), str(failure.value)
    assert _columns(c, "root", "app.t") == ["id", "v"], "nothing of a refused query stays"
    # Set on an existing column, a volatile default fills nothing: captured.
    c.sql("root", "alter table app.t add column u uuid")
    c.sql("root", "alter table app.t alter column u set default gen_random_uuid()")
    # Two different tables in one query each find their statement.
    c.sql("root", "alter table app.t add column a int; alter table app.other add column b int")
    c.catch_up("full", "part")
    assert _columns(c, "full", "app.t") == ["id", "v", "u", "a"]
    assert _columns(c, "full", "app.other") == ["id", "w", "b"]
    assert _columns(c, "part", "part.t1") == ["id", "v", "u", "a"]


def test_off_and_on_and_bad_input(three: Cascade) -> None:
    c = three
    shown = c.cli("root", "capture-ddl")
    assert shown.code == 0 and "off" in shown.out
    assert c.cli("root", "capture-ddl", "on", "--no-indexes").code == 0
    shown = c.cli("root", "capture-ddl")
    assert "on for queue" in shown.out and "CREATE INDEX" not in shown.out
    c.sql("root", "create index t_v on app.t (v)")  # left to each node
    c.sql("root", "alter table app.t add column a int")
    assert c.cli("root", "capture-ddl", "off").code == 0
    assert c.sql("root", "select count(*) from pg_event_trigger") == [(0,)]
    c.sql("root", "alter table app.t add column b int")  # not captured: off
    c.catch_up("full", "part")
    assert _columns(c, "full", "app.t") == ["id", "v", "a"]
    assert c.sql("full", "select count(*) from pg_indexes where indexname = 't_v'") == [(0,)]

    leaf = c.cli("part", "capture-ddl", "on")
    assert leaf.code != 0 and "root only" in leaf.err and len(leaf.err.strip().splitlines()) == 1
    word = c.cli("root", "capture-ddl", "maybe")
    assert word.code != 0 and "expected on or off" in word.err


def test_branch_and_leaf_below_and_a_capture_with_options(make_cascade, new_db_a, new_db_b) -> None:
    """root -> branch -> leaf: the branch forwards the statement to the leaf below it; a
    table captured with ignore= gets its capture function made again for the new shape."""
    c = make_cascade()
    c.node("root", new_db_a(), "root")
    c.node("branch", new_db_b(), "branch", "root")
    c.node("leaf", new_db_b(), "leaf", "branch")
    for node in ("root", "branch", "leaf"):
        c.sql(node, "create table public.t (id int primary key, v text, secret text)")
    c.sql("root", "insert into public.t select g, 'v' || g, 's' from generate_series(1, 50) g")
    c.add("root", "public.t", trigger_flags=None, trigger_args=("ignore=secret",))
    c.add("branch", "public.t")
    c.add("leaf", "public.t")
    c.catch_up("branch", "leaf")
    assert c.cli("root", "capture-ddl", "on").code == 0
    c.sql("root", "alter table public.t add column n int default 0")
    c.sql("root", "insert into public.t values (51, 'new', 'hidden', 5)")
    c.sql("root", "update public.t set n = id, secret = 'x' where id <= 3")
    c.catch_up("branch", "leaf")
    q = "select id, v, n from public.t order by id"
    for node in ("branch", "leaf"):
        assert _columns(c, node, "public.t") == ["id", "v", "secret", "n"]
        assert c.sql(node, q) == c.sql("root", q)
        assert c.sql(node, "select count(*) from public.t where secret is not null") == [(0,)]


@pytest.mark.slow
def test_a_mixed_case_unicode_name_through_the_tree(tree) -> None:
    """The tree's table ``public."Tbl é"``: a DO block and a plain statement reach the
    branch, the leaf below it and the root's other leaf, with workers looping."""
    tree.start("branch", "leaf", "leaf2")
    tree.start_ticker()
    assert tree.cli("root", "capture-ddl", "on").code == 0
    tree.write("root", "insert into {t} values (1, 'a')")
    tree.write("root", 'do $$ begin alter table public."Tbl é" add column "Ünï" int; end $$')
    tree.write("root", "insert into {t} values (2, 'b', 20)")
    tree.write("root", "comment on column {t}.\"Ünï\" is 'é'")
    tree.catch_up("branch", "leaf", "leaf2")
    query = sql.SQL('select id, v, "Ünï" from {} order by id').format(TABLE_ID)
    for node in ("branch", "leaf", "leaf2"):
        assert tree.sql(node, query) == [(1, "a", None), (2, "b", 20)]
