"""Fixtures for the queue tests: a fresh database with ferry_queue installed."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from queue_helpers import Scalar, install_queue


@pytest.fixture
def qdb(db_a: str) -> str:
    """Connstr of a fresh database on cluster A with the queue schema installed."""
    return install_queue(db_a)


@pytest.fixture
def qconn(qdb: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to ``qdb``."""
    with psycopg.connect(qdb, autocommit=True) as conn:
        yield conn


@pytest.fixture
def scalar(qconn: psycopg.Connection) -> Scalar:
    """``scalar(sql, *params)``: the first column of the first row."""

    def run(query: str, *params: object) -> object:
        row = qconn.execute(query, params or None).fetchone()  # type: ignore[arg-type]
        return None if row is None else row[0]

    return run
