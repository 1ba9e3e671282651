"""copy_out: a COPY TO STDOUT read off libpq in chunks, the connection left as psycopg's own
COPY would leave it: after the data, after an error at the start or midway, after a stop."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from pgferry.copyio import copy_out, copy_out_many

ROWS = "copy (select g, md5(g::text) from generate_series(1, {}) g) to stdout"


def test_the_data_in_chunks_then_the_transaction_goes_on(db_a: str) -> None:
    with psycopg.connect(db_a) as conn:
        conn.execute("select 1")  # a transaction open, as the copy's source has one
        chunks = list(copy_out(conn, sql.SQL(ROWS.format(100_000)), size=1 << 16))
        assert len(chunks) > 10 and all(len(c) >= 1 << 16 for c in chunks[:-1])
        data = b"".join(chunks)
        with conn.cursor() as cur, cur.copy(ROWS.format(100_000)) as copy:
            assert data == b"".join(bytes(row) for row in copy)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert conn.execute("select 2").fetchone() == (2,)


def test_errors_at_the_start_and_midway(db_a: str) -> None:
    with psycopg.connect(db_a, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            list(copy_out(conn, sql.SQL("copy nope to stdout")))
        assert conn.execute("select 1").fetchone() == (1,)
        midway = "copy (select 1 / (g - 50000) from generate_series(1, 60000) g) to stdout"
        with pytest.raises(psycopg.errors.DivisionByZero):
            list(copy_out(conn, sql.SQL(midway), size=1024))
        assert conn.execute("select 1").fetchone() == (1,)


def test_a_reader_that_stops_early_leaves_the_connection_usable(db_a: str) -> None:
    with psycopg.connect(db_a, autocommit=True) as conn:
        chunks = copy_out(conn, sql.SQL(ROWS.format(2_000_000)), size=1024)
        next(chunks)
        chunks.close()  # the COPY is cancelled and what is left of it read
        assert conn.execute("select 1").fetchone() == (1,)


IDLE = psycopg.pq.TransactionStatus.IDLE


def test_read_only_in_one_message_leaves_the_connection_idle(db_a: str) -> None:
    """BEGIN READ ONLY, the COPY and COMMIT sent together: the same data, the connection
    idle after the data, an error (at the start, midway, a write refused) or a stop."""
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute("create table if not exists copyout_w (v int)")
        conn.execute(
            "create or replace function copyout_write() returns int language sql"
            " as 'insert into copyout_w values (1) returning v'"
        )
        plain = b"".join(copy_out(conn, sql.SQL(ROWS.format(5_000))))
        wrapped = b"".join(copy_out(conn, sql.SQL(ROWS.format(5_000)), read_only=True))
        assert wrapped == plain and conn.info.transaction_status == IDLE
        with pytest.raises(psycopg.errors.UndefinedTable):
            list(copy_out(conn, sql.SQL("copy nope to stdout"), read_only=True))
        assert conn.info.transaction_status == IDLE
        midway = "copy (select 1 / (g - 50000) from generate_series(1, 60000) g) to stdout"
        with pytest.raises(psycopg.errors.DivisionByZero):
            list(copy_out(conn, sql.SQL(midway), size=1024, read_only=True))
        assert conn.info.transaction_status == IDLE
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            list(copy_out(conn, sql.SQL("copy (select copyout_write()) to stdout"), read_only=True))
        assert conn.info.transaction_status == IDLE
        assert conn.execute("select count(*) from copyout_w").fetchone() == (0,)
        chunks = copy_out(conn, sql.SQL(ROWS.format(2_000_000)), size=1024, read_only=True)
        next(chunks)
        chunks.close()
        assert conn.info.transaction_status == IDLE
        assert conn.execute("select 1").fetchone() == (1,)


def test_many_copies_in_one_message(db_a: str) -> None:
    """Each statement's data in order, as copy_out reads it alone; an error in a later
    statement is raised where it is met; unread data is skipped; a stop leaves it idle."""
    with psycopg.connect(db_a, autocommit=True) as conn:
        statements = [sql.SQL(ROWS.format(n)) for n in (3, 50_000, 0, 7)]
        alone = [b"".join(copy_out(conn, s, read_only=True)) for s in statements]
        together = [b"".join(c) for c in copy_out_many(conn, statements, 1024, read_only=True)]
        assert together == alone and conn.info.transaction_status == IDLE
        # Only the first chunk of each taken: the rest is skipped.
        firsts = [next(iter(c), b"") for c in copy_out_many(conn, statements, 1024, read_only=True)]
        assert [f[:20] for f in firsts[:2]] == [a[:20] for a in alone[:2]]
        assert conn.info.transaction_status == IDLE
        failing = [statements[0], sql.SQL("copy nope to stdout"), statements[1]]
        streams = copy_out_many(conn, failing, read_only=True)
        assert b"".join(next(streams)) == alone[0]
        with pytest.raises(psycopg.errors.UndefinedTable):
            next(streams)
        assert conn.info.transaction_status == IDLE
        streams = copy_out_many(conn, statements, 1024, read_only=True)
        next(iter(next(streams)))
        next(streams)
        streams.close()  # stopped midway: cancelled, left idle
        assert conn.info.transaction_status == IDLE
        assert conn.execute("select 1").fetchone() == (1,)
        # Every statement's data read, then no more asked for (the reader's own work
        # failed): the COMMIT's result came with the last data, nothing is left pending.
        streams = copy_out_many(conn, statements[:2], read_only=True)
        assert [b"".join(next(streams)) for _ in range(2)] == alone[:2]
        assert conn.pgconn.transaction_status == IDLE
        streams.close()
        assert conn.execute("select 1").fetchone() == (1,)
