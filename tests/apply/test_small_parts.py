"""A small batch's tables read in one provider query and staged in one message
(apply/small_parts.py): every value arrives as the usual path would bring it."""

from __future__ import annotations

import psycopg
import pytest

from pgferry.apply import small_parts
from pgferry.apply.read import read_only_rows

SCHEMA = """
create schema if not exists "Small Ü";
create type "Small Ü".mood as enum ('sad', 'ok');
create table "Small Ü"."Odd" (
    "Id" int primary key, "Mixed Case" text, tags text[], doc jsonb, raw bytea,
    amount numeric(12, 3), at timestamptz, span interval, mood "Small Ü".mood, f float8
);
create table "Small Ü".plain (id int primary key, v text);
"""
TABLES = ('"Small Ü"."Odd"', '"Small Ü".plain')
# Text that record, array and COPY quoting must all carry unchanged.
AWKWARD = [
    "quote \" and ' both",
    "back\\slash \\N",
    "{braces}, (parens), commas",
    "NULL",
    "",
    "line\nbreak\ttab",
    "ünïcødé ✓",
    " leading and trailing ",
]


def _same(pair) -> None:
    for table in TABLES:
        q = f"select t::text from {table} t order by 1"
        assert pair.leaf(q) == pair.root(q), table


@pytest.fixture
def spied(monkeypatch) -> list[int]:
    """How many segments the small path read (the real function runs)."""
    calls: list[int] = []
    real = small_parts.read_parts

    def read_parts(provider, works, batch_sql, segment):
        calls.append(len(works))
        return real(provider, works, batch_sql, segment)

    monkeypatch.setattr(small_parts, "read_parts", read_parts)
    return calls


def test_awkward_values_arrive_unchanged(pair, spied) -> None:
    pair.root(SCHEMA)
    pair.leaf(SCHEMA)
    pair.add_tables(*TABLES)
    worker = pair.catch_up()
    for n, text in enumerate(AWKWARD, start=1):
        pair.root(
            """insert into "Small Ü"."Odd" values (%s, %s, %s, %s, %s, %s, now(), %s,
               'ok', %s)""",
            (
                n, text, [text, None, "x"], psycopg.types.json.Jsonb({"k": text, "n": None}),
                text.encode(), "12345.678", f"{n} days 03:04:05", 0.1 + n / 3,
            ),
        )  # fmt: skip
        pair.root('insert into "Small Ü".plain values (%s, %s)', (n, text))
    pair.root("""insert into "Small Ü"."Odd" ("Id") values (100)""")  # every other column null
    pair.catch_up(worker)
    _same(pair)
    assert spied, "the small batch took the usual path"
    # Updates and deletes of a later small batch, and a key change.
    spied.clear()
    pair.root("""update "Small Ü"."Odd" set "Mixed Case" = 'NULL', tags = '{}' where "Id" < 4""")
    pair.root("""delete from "Small Ü".plain where id in (2, 5)""")
    pair.root("""update "Small Ü".plain set id = id + 50, v = null where id = 1""")
    pair.catch_up(worker)
    _same(pair)
    assert spied == [2]


def test_large_batches_take_the_usual_path(pair, spied) -> None:
    pair.root(SCHEMA)
    pair.leaf(SCHEMA)
    pair.add_tables(*TABLES)
    worker = pair.catch_up()
    pair.root(
        """insert into "Small Ü".plain select g, 'v' || g from generate_series(1, %s) g""",
        (small_parts.SMALL_EVENTS + 1,),
    )
    pair.root("""insert into "Small Ü"."Odd" ("Id") values (1)""")
    pair.catch_up(worker)
    _same(pair)
    assert spied == []


def test_read_only_rows_is_read_only_and_leaves_the_connection_idle(db_a: str) -> None:
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute("create table t (id int primary key)")
        conn.execute("insert into t values (1), (2)")
        assert read_only_rows(conn, "select id from t order by id") == [(1,), (2,)]
        rows = read_only_rows(conn, "select current_setting('enable_sort')",
                              setting="set local enable_sort = off")  # fmt: skip
        assert rows == [("off",)]
        assert conn.execute("show enable_sort").fetchone() == ("on",)  # local to it
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            read_only_rows(conn, "insert into t values (3) returning id")
        with pytest.raises(psycopg.errors.DivisionByZero):
            read_only_rows(conn, "select 1 / (id - 1) from t")
        # Left idle and writable: nothing of the failed reads stays open.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        conn.execute("insert into t values (3)")
        assert conn.execute("select count(*) from t").fetchone() == (3,)
