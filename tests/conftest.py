"""Shared fixtures: real PostgreSQL clusters and one SparkSession per test session.

Two clusters (``pg_a``, ``pg_b``) start once per session; each test that needs a database
gets a fresh one with ``new_db``, so tests never see each other's tables.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import pytest

from pgferry.testing.cluster import LocalCluster, make_cluster

_db_counter = itertools.count(1)


@pytest.fixture(scope="session")
def pg_a() -> Iterator[LocalCluster]:
    cluster = make_cluster("a")
    yield cluster
    cluster.destroy()


@pytest.fixture(scope="session")
def pg_b() -> Iterator[LocalCluster]:
    cluster = make_cluster("b")
    yield cluster
    cluster.destroy()


def _new_db_factory(cluster: LocalCluster, prefix: str) -> Callable[[str | None], str]:
    def create(name: str | None = None) -> str:
        dbname = name or f"{prefix}_{os.getpid()}_{next(_db_counter)}"
        return cluster.createdb(dbname)

    return create


@pytest.fixture
def new_db_a(pg_a: LocalCluster) -> Callable[[str | None], str]:
    """Factory: create a fresh database on cluster A, return its connstr."""
    return _new_db_factory(pg_a, "a")


@pytest.fixture
def new_db_b(pg_b: LocalCluster) -> Callable[[str | None], str]:
    """Factory: create a fresh database on cluster B, return its connstr."""
    return _new_db_factory(pg_b, "b")


@pytest.fixture
def db_a(new_db_a: Callable[[str | None], str]) -> str:
    """A fresh database on cluster A (connstr)."""
    return new_db_a(None)


@pytest.fixture
def db_b(new_db_b: Callable[[str | None], str]) -> str:
    """A fresh database on cluster B (connstr)."""
    return new_db_b(None)


@pytest.fixture(scope="session")
def spark():
    """One small local SparkSession shared by the whole test session."""
    from pgferry.pipeline.spark import get_spark

    session = get_spark(
        master="local[2]",
        app_name="pgferry-tests",
        settings={"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"},
    )
    yield session
    session.stop()
