"""ferry.ddl_statements: a query string split at the semicolons that end statements, and
the rename of a replicated table through execute followed by the registry on both sides."""

from __future__ import annotations

import psycopg
import pytest

from pgferry import schema
from pgferry.cli.main import main


@pytest.fixture
def node_db(db_a: str, pg_a) -> str:
    dsn = pg_a.connstr(db_a)
    with psycopg.connect(dsn) as conn:
        schema.install(conn, schema.COMPONENTS)
    return dsn


@pytest.mark.parametrize(
    ("query", "statements"),
    [
        ("alter table t add c int", ["alter table t add c int"]),
        ("alter table t add c int;;  ", ["alter table t add c int"]),
        ("select ';'; alter table t add c text default 'a;b'",
         ["select ';'", "alter table t add c text default 'a;b'"]),
        ("select 'it''s;'; select 2", ["select 'it''s;'", "select 2"]),
        ("select E'\\';'; select 2", ["select E'\\';'", "select 2"]),
        ('alter table "a;b" add c int; select 1', ['alter table "a;b" add c int', "select 1"]),
        ("do $x$ begin perform 1; end $x$; select $$;$$",
         ["do $x$ begin perform 1; end $x$", "select $$;$$"]),
        ("-- a; comment\nselect 1; /* b; /* nested; */ c; */ select 2",
         ["-- a; comment\nselect 1", "/* b; /* nested; */ c; */ select 2"]),
        ("select a$b; select 2", ["select a$b", "select 2"]),
    ],
)  # fmt: skip
def test_statements_split_where_they_end(node_db: str, query: str, statements: list[str]) -> None:
    with psycopg.connect(node_db) as conn:
        got = conn.execute("select ferry.ddl_statements(%s)", (query,)).fetchone()[0]
    assert got == statements


def test_a_rename_through_execute_is_followed(pair, tmp_path) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v text)")
    pair.add_tables("public.t")
    worker = pair.catch_up()
    script = tmp_path / "rename.sql"
    script.write_text("alter table public.t rename to t2;")
    assert main([str(pair.root_cfg.path), "execute", str(script)]) == 0
    pair.root("insert into public.t2 values (1, 'after')")
    pair.catch_up(worker)
    reg = "select table_name from ferry.table_info where local"
    assert pair.root(reg) == [("public.t2",)] and pair.leaf(reg) == [("public.t2",)]
    assert pair.leaf("select * from public.t2") == [(1, "after")]
