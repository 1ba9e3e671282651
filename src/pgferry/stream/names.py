"""How the change feed names a table: ``schema.table`` as the capture's events name it
(``format('%I.%I')``), from a name an option gives, and that name's parts for a query."""

from __future__ import annotations

import psycopg

from pgferry.errors import ConfigError


def split(conn: psycopg.Connection, table: str) -> list[str]:
    return list(conn.execute("select parse_ident(%s)", (table,)).fetchone()[0])


def quoted_table(conn: psycopg.Connection, name: str) -> str:
    """``schema.table`` as events name it (``format('%I.%I')``); ``public`` when no schema."""
    row = conn.execute(
        "select format('%%I.%%I', coalesce(p[array_length(p, 1) - 1], 'public'),"
        " p[array_length(p, 1)]) from parse_ident(%s) p where array_length(p, 1) <= 2",
        (name,),
    ).fetchone()
    if row is None:
        raise ConfigError(f"pgferry change feed: bad table name {name!r} in option tables")
    return row[0]
