"""The lake load's task (pipeline/lake_load.py) and planning (pipeline/lake_copy.py): the
values of the CSV path whatever the database's own settings, the COPY read with libpq's
calls, the read-ahead thread, the ranges shared out evenly and the Parquet dictionaries
chosen from the source's statistics."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from pgferry.db import connect
from pgferry.errors import PgferryError
from pgferry.lake import delta
from pgferry.lake import types as lake_types
from pgferry.lake.spec import LakeSpec
from pgferry.pipeline import lake_load
from pgferry.pipeline.copy import CopyTask
from pgferry.pipeline.lake_copy import copy_to_lake, dictionary_columns, even_ranges
from pgferry.pipeline.tables import resolve_table

UTC = dt.UTC


def _no_spark():
    raise AssertionError("a small load starts no Spark")


def _load(dsn: str, lake_dir: Path, table: str, key: list[str], condition: str | None = None):
    from deltalake import DeltaTable

    spec = LakeSpec("delta", str(lake_dir), "public", table, f"q:n:public.{table}")
    with connect(dsn) as conn:
        columns = lake_types.table_columns(conn, f"public.{table}")
    delta.prepare(spec, lake_types.arrow_schema(columns), key)
    task = CopyTask(f"public.{table}", f"public.{table}", copy_condition=condition)
    result = copy_to_lake(_no_spark, dsn, dsn, [task], [spec])
    return result, DeltaTable(spec.location)


def test_values_whatever_the_session_settings(db_a: str, lake_dir: Path) -> None:
    """Timestamps travel as UTC text with an offset and ISO dates, even where the database
    says otherwise; text keeps quotes, commas, newlines; an infinite timestamp, which has
    no lake value, stops the load in one line and commits nothing."""
    from deltalake import DeltaTable

    with connect(db_a, autocommit=True) as conn:
        dbname = conn.info.dbname
        conn.execute(f"alter database {dbname} set timezone = 'Asia/Kathmandu'")
        conn.execute(f"alter database {dbname} set datestyle = 'SQL, DMY'")
        conn.execute(
            "create table public.v (id int primary key, ts timestamptz, tsn timestamp,"
            " d date, n numeric(20,6), v text, ok boolean)"
        )
        conn.execute(
            "insert into public.v values"
            " (1, '2024-06-01 10:00:00.5+05', '2024-06-01 10:00:00.000001', '2024-02-29',"
            "  -12345678901234.000001, e'a,\"b\"\\nc', true),"
            " (2, null, '0001-01-01 00:00', '1970-01-01', 0, '', false),"
            " (3, '1999-12-31 23:59:59.999999+00', null, null, null, null, null)"
        )
    result, table = _load(db_a, lake_dir, "v", ["id"])
    assert result.rows == {"public.v": 3}
    rows = sorted(delta.rows_at(table.table_uri).to_pylist(), key=lambda r: r["id"])
    assert [(r["ts"], r["tsn"], r["d"], r["n"], r["v"], r["ok"]) for r in rows] == [
        (dt.datetime(2024, 6, 1, 5, 0, 0, 500000, tzinfo=UTC),
         dt.datetime(2024, 6, 1, 10, 0, 0, 1), dt.date(2024, 2, 29),
         Decimal("-12345678901234.000001"), 'a,"b"\nc', True),
        (None, dt.datetime(1, 1, 1), dt.date(1970, 1, 1), Decimal("0.000000"), "", False),
        (dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None, None, None, None,
         None),
    ]  # fmt: skip

    with connect(db_a, autocommit=True) as conn:
        conn.execute("update public.v set ts = 'infinity' where id = 2")
    with pytest.raises(PgferryError) as failed:
        _load(db_a, lake_dir, "v", ["id"])
    assert "public.v" in str(failed.value) and "'infinity'" in str(failed.value)
    assert "\n" not in str(failed.value)
    assert table.version() == DeltaTable(table.table_uri).version()  # nothing committed


def test_condition_and_floats_in_the_session_settings(db_a: str, lake_dir: Path) -> None:
    """A copy condition's literals mean what the database's TimeZone says (the load does
    not change it); floats read back exactly even where extra_float_digits is 0."""
    with connect(db_a, autocommit=True) as conn:
        dbname = conn.info.dbname
        conn.execute(f"alter database {dbname} set timezone = 'Asia/Kathmandu'")  # +05:45
        conn.execute(f"alter database {dbname} set extra_float_digits = 0")
        conn.execute("create table public.c (id int primary key, ts timestamptz, f float8)")
        conn.execute(
            "insert into public.c values (1, '2024-01-01 00:00+00', 0.1::float8 + 0.2::float8),"
            " (2, '2024-01-01 03:00+00', 1e-310), (3, '2023-12-31 23:00+00', 1)"
        )
    # 05:45 in Kathmandu is 00:00 UTC: rows 1 and 2 (in UTC it would be none)
    _, table = _load(db_a, lake_dir, "c", ["id"], "ts >= '2024-01-01 05:45'")
    rows = sorted(delta.rows_at(table.table_uri).to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["f"]) for r in rows] == [(1, 0.1 + 0.2), (2, 1e-310)]


def test_dictionary_only_where_values_repeat(db_a: str, lake_dir: Path) -> None:
    with connect(db_a, autocommit=True) as conn:
        conn.execute("create table public.m (id int primary key, mood text, note text)")
        conn.execute(
            "insert into public.m select g, (array['sad', 'ok'])[g % 2 + 1], md5(g::text)"
            " from generate_series(1, 3000) g"
        )
        src = resolve_table(conn, "public.m")
        assert dictionary_columns(conn, src) is None  # no statistics yet: Arrow's default
        conn.execute("analyze public.m")
        src = resolve_table(conn, "public.m")
        assert dictionary_columns(conn, src) == ("mood",)
    _, table = _load(db_a, lake_dir, "m", ["id"])
    import pyarrow.parquet as pq

    (path,) = table.file_uris()
    chunks = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {chunks.column(i).path_in_schema: chunks.column(i).encodings for i in range(3)}
    assert any("DICTIONARY" in e for e in encodings["mood"])
    assert not any("DICTIONARY" in e for e in encodings["id"] + encodings["note"])


def test_copy_pieces_whole_rows_and_errors(db_a: str) -> None:
    query = b"copy (select g, repeat('x', g % 7) from generate_series(1, 2000) g) to stdout"
    with connect(db_a) as conn:
        pieces = list(lake_load.copy_pieces(conn, query, 1000))
        assert len(pieces) > 5 and all(p.endswith(b"\n") for p in pieces)
        rows = b"".join(pieces).splitlines()
        assert rows[0] == b"1\tx" and rows[-1] == b"2000\txxxxx" and len(rows) == 2000
        assert conn.execute("select 1").fetchone() == (1,)  # the connection is idle again
    with connect(db_a) as conn:
        failing = b"copy (select 1 / (g - 1500) from generate_series(1, 2000) g) to stdout"
        with pytest.raises(psycopg.errors.DivisionByZero):
            list(lake_load.copy_pieces(conn, failing, 100))
        conn.rollback()
        with pytest.raises(psycopg.errors.UndefinedTable):
            list(lake_load.copy_pieces(conn, b"copy nowhere to stdout", 100))
        conn.rollback()
        assert conn.execute("select 2").fetchone() == (2,)


def test_read_ahead_ends_its_thread() -> None:
    def running() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "pgferry-lake-read"]

    ahead = lake_load.read_ahead(iter(range(100)), 2)
    assert next(ahead) == 0
    ahead.close()  # the consumer stopped early
    assert running() == []

    def failing():
        yield 1
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        list(lake_load.read_ahead(failing(), 2))
    assert running() == []


@pytest.mark.parametrize("pages", [0, 600, 10_310, 51_550])
def test_ranges_shared_evenly(pages: int) -> None:
    ranges = even_ranges(pages, 2)
    if pages <= 512:
        assert ranges == [(None, None)]
        return
    assert len(ranges) % 2 == 0 or len(ranges) == 1
    assert ranges[0][0] is None and ranges[-1][1] is None
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
