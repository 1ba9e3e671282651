"""An S3-protocol server on this machine for the tests of lakes on object storage.

moto's standalone server (``moto[server]``, the test extra) runs in a process of its own
on a free port: no real cloud is reachable from the machines the tests run on, and moto
answers the S3 calls delta-rs, pyiceberg and pyarrow make, including the conditional PUT
(``If-None-Match: *``) with which delta-rs commits a version only if no other writer did.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


class S3:
    """An S3-protocol server on this machine and a client of it (boto3)."""

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.endpoint = endpoint
        self.pid = 0
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

    import pytest  # a test's helper: a missing moto skips the test

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
        server = S3(endpoint)
        server.pid = proc.pid  # a test may stop it (SIGSTOP) to stall the store
        yield server
    finally:
        proc.terminate()
        proc.wait(10)
