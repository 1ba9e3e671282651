"""db.run_prepared: a prepared statement through libpq, with psycopg's errors."""

from __future__ import annotations

import psycopg
import pytest

from pgferry.db import run_prepared


def test_run_prepared_returns_the_row_and_raises_sql_errors(db_a: str) -> None:
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute("prepare two as select 1, 'x'::text")
        conn.execute("prepare fails as select 1 / 0")
        conn.execute("prepare none as select 1 where false")
        result = run_prepared(conn, b"two")
        assert (result.get_value(0, 0), result.get_value(0, 1)) == (b"1", b"x")
        with pytest.raises(psycopg.errors.DivisionByZero):
            run_prepared(conn, b"fails")
        with pytest.raises(psycopg.InterfaceError, match="one row"):
            run_prepared(conn, b"none")
        # The connection is still usable, for libpq and for psycopg.
        assert run_prepared(conn, b"two").get_value(0, 0) == b"1"
        assert conn.execute("select 2").fetchone() == (2,)
