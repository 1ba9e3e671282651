"""SQL helpers for the pipeline tests."""

from __future__ import annotations

from collections.abc import Iterable

import psycopg


def run_sql(connstr: str, *statements: str, params: Iterable | None = None) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt, params)  # type: ignore[arg-type]


def fetch(connstr: str, query: str, params: Iterable | None = None) -> list[tuple]:
    with psycopg.connect(connstr, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def one(connstr: str, query: str, params: Iterable | None = None):
    return fetch(connstr, query, params)[0][0]
