"""Replay's provider reads run read-only (an operator's copy condition runs there), opened
with one ``BEGIN READ ONLY`` on an idle connection, which is left as it was."""

from __future__ import annotations

import psycopg
import pytest

from pgferry.apply.replay.read import read_chunks, read_only, read_only_rows


def _setup(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("create table t (id int primary key)")
        conn.execute("insert into t values (1), (2)")
        conn.execute(
            "create function wipe() returns boolean language sql as 'delete from t returning true'"
        )


def test_idle_connection_reads_read_only_and_is_left_as_it_was(db_a: str) -> None:
    _setup(db_a)
    with psycopg.connect(db_a, autocommit=True) as conn:
        with read_only(conn):
            assert conn.execute("show transaction_read_only").fetchone() == ("on",)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction), read_only(conn):
            conn.execute("select wipe()")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            list(read_chunks(conn, "select id from t where wipe()"))
        # The connection is left as it was: the next transaction may write.
        assert conn.read_only is None
        conn.execute("insert into t values (3)")
        assert b"".join(read_chunks(conn, "select id from t order by id")) == b"1\n2\n3\n"


def test_inside_a_transaction_a_read_only_savepoint(db_a: str) -> None:
    _setup(db_a)
    with psycopg.connect(db_a) as conn:  # a transaction is open after the first statement
        conn.execute("insert into t values (4)")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction), read_only(conn):
            conn.execute("select wipe()")
        assert conn.execute("select count(*) from t").fetchone() == (3,)


def test_read_only_rows_is_read_only_and_leaves_the_connection_idle(db_a: str) -> None:
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute("create table t (id int primary key)")
        conn.execute("insert into t values (1), (2)")
        assert read_only_rows(conn, "select id from t order by id") == [(1,), (2,)]
        rows = read_only_rows(conn, "select current_setting('enable_sort')",
                              settings=("set local enable_sort = off",))  # fmt: skip
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
