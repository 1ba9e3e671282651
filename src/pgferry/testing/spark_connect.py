"""A Spark Connect server for tests and benchmarks, started from the pyspark package.

The server is Spark's own (``org.apache.spark.sql.connect.service.SparkConnectServer``, the
class ``sbin/start-connect-server.sh`` runs), in local mode on 127.0.0.1; its Python
workers run this interpreter with this pgferry on their path, as a server deployed for
pgferry would have it installed.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pgferry
from pgferry.errors import WaitTimeout
from pgferry.polling import wait_until
from pgferry.testing.cluster import free_port
from pgferry.testing.spark_env import spark_env, spark_home

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT = 180.0
_STARTED = re.compile(r"Spark Connect server started at: \S*:(\d+)")


@dataclass
class ConnectServer:
    url: str  # sc://127.0.0.1:PORT
    proc: subprocess.Popen
    log: Path

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_connect_server(workdir: Path, master: str = "local[2]") -> ConnectServer:
    """Start a server, return once it accepts sessions (its log names the port)."""
    home = spark_home()
    package_root = str(Path(pgferry.__file__).resolve().parent.parent)
    env = spark_env(
        PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    )
    log = workdir / "connect-server.log"
    # fmt: off
    cmd = [
        str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", master,
        "--conf", f"spark.connect.grpc.binding.port={free_port()}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.python.daemon.module=pgferry.pipeline.daemon",
        "--driver-memory", "768m",
        "spark-internal",
    ]
    # fmt: on
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)

    def started() -> re.Match[str] | bool | None:
        # True once the server exited: nothing more to wait for.
        return _STARTED.search(log.read_text(errors="replace")) or proc.poll() is not None

    try:
        found = wait_until(started, timeout=START_TIMEOUT, interval=0.2, what="Spark Connect")
    except WaitTimeout:
        found = None
    if isinstance(found, re.Match):
        return ConnectServer(f"sc://127.0.0.1:{found[1]}", proc, log)
    server = ConnectServer("", proc, log)
    server.stop()
    tail = log.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"Spark Connect server did not start:\n{tail}")
