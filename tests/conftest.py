"""Shared fixtures: real PostgreSQL clusters and one SparkSession per test session.

Two clusters (``pg_a``, ``pg_b``) start once per session; each test that needs a database
gets a fresh one with ``new_db``, so tests never see each other's tables.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pgferry.cli.main import main
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


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def write_ini(tmp_path: Path) -> Callable[..., Path]:
    """``write_ini(job, db, queue='replika', **settings)`` -> path of a [londiste3] ini."""

    def make(job: str, db: str, queue: str = "replika", **settings: str) -> Path:
        path = tmp_path / f"{job}.ini"
        lines = [
            "[londiste3]",
            f"job_name = {job}",
            f"db = {db}",
            f"queue_name = {queue}",
            f"logfile = {tmp_path}/log/%(job_name)s.log",
            f"pidfile = {tmp_path}/pid/%(job_name)s.pid",
        ]
        lines += [f"{k} = {v}" for k, v in settings.items()]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return make


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run ``pgferry ARGS`` in-process; returns exit code and captured output."""

    def run(*args: object) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """One Spark Connect server (local mode, 2 cores) for the session's Connect tests."""
    from pgferry.testing.spark_connect import start_connect_server

    server = start_connect_server(tmp_path_factory.mktemp("spark-connect"))
    yield server
    server.stop()
