"""Fixtures of the lake tests: a root and a lake leaf whose lake is a temporary folder."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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


class S3:
    """An S3-protocol server on this machine and a client of it (boto3)."""

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.endpoint = endpoint
        self.key, self.secret, self.region = "pgferry-test-key", "pgferry-test-secret", "us-east-1"
        self.client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=self.key,
            aws_secret_access_key=self.secret, region_name=self.region,
        )  # fmt: skip

    def settings(self, **more: str) -> dict[str, str]:
        """The leaf's ini settings that reach this server."""
        return {
            "lake_s3_endpoint": self.endpoint, "lake_s3_region": self.region,
            "lake_s3_access_key_id": self.key, "lake_s3_secret_access_key": self.secret,
            "lake_timeout": "20", **more,
        }  # fmt: skip

    def options(self) -> tuple[tuple[str, str], ...]:
        from pgferry.config import Config
        from pgferry.lake import storage

        return storage.options(Config(Path("s3.ini"), "londiste3", self.settings()))

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


@contextlib.contextmanager
def moto_server(**env: str) -> Iterator[S3]:
    """moto's standalone server (``moto[server]`` from PyPI) in a process of its own, on a
    free port, until the block ends; ``env``: moto's settings.

    No real cloud is reachable from this machine; moto answers the S3 calls delta-rs,
    pyiceberg and pyarrow make, including the conditional PUT (``If-None-Match: *``) with
    which delta-rs commits a version only if no other writer has: the rule pgferry's one
    writer per table relies on.  (Run in this process, its server thread stalled under
    delta-rs's concurrent requests.)"""
    import shutil
    import subprocess
    import sys
    import urllib.request

    from pgferry.polling import wait_until
    from pgferry.testing.cluster import free_port

    pytest.importorskip("moto", reason="moto[server] (the test extra) is not installed")
    port = free_port()
    binary = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    command = [binary] if binary else [sys.executable, "-m", "moto.server"]
    proc = subprocess.Popen(
        [*command, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env},
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                return True
        except OSError:
            return proc.poll() is not None  # gone: fail below

    try:
        wait_until(answers, timeout=60, what="the S3 server to answer")
        assert proc.poll() is None, "moto_server exited"
        yield S3(endpoint)
    finally:
        proc.terminate()
        proc.wait(10)


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
