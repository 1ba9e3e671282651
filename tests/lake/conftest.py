"""Fixtures of the lake tests: a root and a lake leaf whose lake is a temporary folder."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pgferry.testing.s3 import S3, moto_server

pytest.importorskip("deltalake")


@pytest.fixture
def lake_dir(tmp_path: Path) -> Path:
    path = tmp_path / "lake"
    path.mkdir()
    return path


@pytest.fixture
def lake_pair(make_pair, lake_dir: Path) -> Callable[..., object]:
    """A root and a leaf with ``lake_path`` set (``**settings`` add to the leaf's ini)."""

    def build(**settings: str):
        return make_pair(lake_path=str(lake_dir), **settings)

    return build


def sorted_rows(rows) -> list[tuple]:
    return sorted((tuple(r) for r in rows), key=repr)


@pytest.fixture
def delta_rows(lake_dir: Path) -> Callable[[str], list[tuple]]:
    """``delta_rows(table)``: the rows of the Delta table public/<table>, sorted."""

    def read(table: str) -> list[tuple]:
        from pgferry.lake import delta

        rows = delta.rows_at(str(lake_dir / "public" / table)).to_pylist()
        return sorted_rows(tuple(r.values()) for r in rows)

    return read


# --- an S3-protocol server --------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3]:
    """One S3-protocol server for the session (:func:`moto_server`)."""
    with moto_server() as server:
        yield server


_buckets = iter(range(1, 1_000_000))


@pytest.fixture
def s3_lake(s3_server: S3) -> tuple[S3, str]:
    """(the server, a lake path ``s3://BUCKET/lake`` in a new bucket of its own)."""
    bucket = f"lake-{next(_buckets)}-{os.getpid()}"
    s3_server.client.create_bucket(Bucket=bucket)
    return s3_server, f"s3://{bucket}/lake"


def s3_rows(server: S3, location: str) -> list[tuple]:
    """The rows of the Delta table at ``location`` on the server, sorted."""
    from pgferry.lake import delta, storage

    rows = delta.rows_at(location, storage_options=storage.delta_options(server.options()))
    return sorted_rows(tuple(r.values()) for r in rows.to_pylist())
