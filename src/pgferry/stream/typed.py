"""The typed change feed's columns: which PostgreSQL types of a table's columns it keeps
(:func:`column_types`, read on the driver), and the lateral reads that turn a row event's
JSON images into those columns (:func:`images`, in each span's query on the executors).
:mod:`pgferry.stream.source` pairs each declaration with its Spark and Arrow types."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgferry.db import connect, describe, error_text
from pgferry.errors import ConfigError, DatabaseError
from pgferry.stream import names

# PostgreSQL types the typed feed keeps (json_to_record declarations); every other type is
# read as text.  pgferry.stream.source pairs each with its Spark and Arrow types.
TYPED = ("int2", "int4", "int8", "float4", "float8", "bool", "text", "timestamptz")
TYPED += ("timestamp", "date", "bytea")
_AS_TEXT = ("varchar", "bpchar", "name", "uuid", "json", "jsonb", "citext")


def column_types(provider: str, table: str) -> list[tuple[str, str]]:
    """``(column, declaration)`` of ``table``'s columns in order, each declaration one of
    :data:`TYPED`, ``numeric(p,s)`` (a numeric with a precision of at most 38), or such a
    type with ``[]`` (a one-dimensional array); everything else ``text``."""
    try:
        conn = connect(provider, autocommit=True, application_name="pgferry-changefeed")
    except DatabaseError as exc:
        raise DatabaseError(f"pgferry change feed: {exc}") from None
    try:
        with conn:
            quoted = names.quoted_table(conn, table)
            rows = conn.execute(
                "select a.attname, coalesce(e.typname, t.typname), a.atttypmod,"
                " e.oid is not null from pg_attribute a join pg_type t on t.oid = a.atttypid"
                " left join pg_type e on e.oid = t.typelem and t.typcategory = 'A'"
                " where a.attrelid = to_regclass(%s) and a.attnum > 0 and not a.attisdropped"
                " order by a.attnum",
                (quoted,),
            ).fetchall()
    except psycopg.Error as exc:
        where = describe(provider)
        raise DatabaseError(f"pgferry change feed: {where}: {error_text(exc)}") from None
    if not rows:
        raise ConfigError(
            f"pgferry change feed: no table {quoted} on {describe(provider)} (option tables)"
        )
    return [
        (name, _declaration(kind, typmod) + ("[]" if array else ""))
        for name, kind, typmod, array in rows
    ]


def _declaration(kind: str, typmod: int) -> str:
    if kind in TYPED:
        return kind
    if kind == "numeric" and typmod >= 4:
        precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        if precision <= 38 and scale <= precision:
            return f"numeric({precision},{scale})"
    return "text"


def images(columns: list[tuple[str, str]]) -> sql.Composed:
    """The lateral reads of a row event's images as the table's columns: ``d`` the row
    (I, U, D), ``o`` an update's old row where the capture keeps it."""
    record = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(decl)) for name, decl in columns
    )
    return sql.SQL(
        " left join lateral json_to_record(case when e.ev_type ~ '^[IUD]:'"
        " then e.ev_data::json end) as d({record}) on true"
        " left join lateral json_to_record(case when e.ev_type like 'U:%'"
        " and left(e.ev_extra2, 1) = '{{' then e.ev_extra2::json end) as o({record}) on true"
    ).format(record=record)
