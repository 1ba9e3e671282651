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
        # As the server's lexer: a dollar-quote tag of any identifier character, a '$'
        # after a number or an operator opens one, a string is E'' only after a lone e.
        ("select $é$;$é$; select 2", ["select $é$;$é$", "select 2"]),
        ("select 1+$a$;$a$; select 2", ["select 1+$a$;$a$", "select 2"]),
        ("select le';'; select 2", ["select le';'", "select 2"]),
        ("select U&\"a;\", U&';'; select 2", ["select U&\"a;\", U&';'", "select 2"]),
        ("select $1; select 2", ["select $1", "select 2"]),
        ("select a$b", ["select a$b"]),  # one statement, whatever it holds
    ],
)  # fmt: skip
def test_statements_split_where_they_end(node_db: str, query: str, statements: list[str]) -> None:
    with psycopg.connect(node_db) as conn:
        got = conn.execute("select ferry.ddl_statements(%s)", (query,)).fetchone()[0]
    assert got == statements


@pytest.mark.parametrize(
    ("query", "why"),
    [
        # The server reads one name "€$q$x" here, and no dollar quote.
        ('alter table t add €$q$x int; select 1; select 1 as "$q$"', "a $ inside a name"),
        ("select a$b; select 2", "a $ inside a name"),
        ("select 1$a$;$a$; select 2", "a $ right after a number"),
        ("select 'a\\'; select 2", "a backslash in a string"),
        ("select 1; select 'a", "an unterminated string"),
        ("select 1; select $a$ x", "an unterminated dollar quote"),
        ("select 1; /* /* */ select 2", "an unterminated comment"),
        ('select 1; select "a', "an unterminated quoted name"),
    ],
)  # fmt: skip
def test_what_might_split_otherwise_is_refused(node_db: str, query: str, why: str) -> None:
    with (
        psycopg.connect(node_db) as conn,
        pytest.raises(psycopg.errors.RaiseException) as failure,
    ):
        conn.execute("select ferry.ddl_statements(%s)", (query,))
    line = failure.value.diag.message_primary or ""
    assert line.startswith("pgferry: capture-ddl cannot be sure how the server split")
    assert why in line


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
