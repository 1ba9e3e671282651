"""Spark Connect: compare, repair and diff on a Spark that is already running.

A Spark Connect server (Spark's ``sbin/start-connect-server.sh``) keeps a driver and its
executors up between commands.  A command that names one (``spark_remote =
sc://host:15002``) starts no JVM of its own: its session is a gRPC client that is ready in
a fraction of a second, where a local session costs a JVM start (5-11 s) and a cluster
application its executors.  The job's Python code runs in the server's Python workers, so
pgferry must be importable there (installed on the server's hosts, or on the server's
``PYTHONPATH``) and both databases reachable from them.

Only compare, repair and diff use it: their jobs are DataFrame work (``mapInArrow``, see
:mod:`pgferry.sync.spark_tasks`) that Spark Connect carries.  The worker's copy and replay
steer their jobs through the classic SparkContext (job groups, cancellation, executor
counts), so the worker runs on ``spark_master`` and leaves ``spark_remote`` to the node's commands.

Only runtime SQL settings (``spark.sql.*``) can be set by a client; any other ``spark.*``
key belongs to the server's own start and is named in a warning.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import re
import socket
import threading
from collections.abc import Mapping

from pgferry.errors import PgferryError, SparkUnavailable
from pgferry.pipeline.spark_cluster import PROBE_TIMEOUT, mask_master
from pgferry.pipeline.spark_errors import job_error

log = logging.getLogger(__name__)

DEFAULT_PORT = 15002  # Spark Connect's default gRPC port
# Seconds the command gives the server at exit to release its session: PySpark's own exit
# hook would retry a server that has gone away for minutes.
RELEASE_TIMEOUT = 2.0
_URL = re.compile(r"^sc://(\[[^\]]+\]|[^:/;]+)(?::(\d+))?/?(;.*)?$")


def is_connect_session(session) -> bool:
    """Whether ``session`` is a Spark Connect client (no SparkContext behind it)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def check_remote(url: str) -> None:
    """Refuse a malformed ``sc://`` URL, or a server whose port does not answer, in one
    line (:class:`SparkUnavailable`) before any session is built."""
    found = _URL.match(url.strip())
    if found is None:
        raise SparkUnavailable(
            f"Spark Connect URL {mask_master(url)} is not sc://host[:port][/;param=value...]"
        )
    host, port = found[1].strip("[]"), int(found[2] or DEFAULT_PORT)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT):
            return
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
    raise SparkUnavailable(f"Spark Connect server {mask_master(url)} cannot be reached: {reason}")


def connect_session(url: str, settings: Mapping[str, str]):
    """A Spark Connect session on ``url``, checked with one round trip to the server."""
    check_remote(url)
    try:
        from pyspark.sql.connect.session import SparkSession as RemoteSession
    except ImportError as exc:
        raise PgferryError(
            f"Spark Connect needs PySpark's connect extra ({exc.name or exc}):"
            " pip install 'pgferry[connect]'"
        ) from None
    runtime = {k: v for k, v in settings.items() if k.startswith("spark.sql.")}
    ignored = sorted(k for k in settings if k not in runtime and k != "spark.remote")
    if ignored:
        log.warning(
            "Spark Connect: %s not set (the server's own start settings)", ", ".join(ignored)
        )
    builder = RemoteSession.builder.remote(url.strip())
    for key, value in runtime.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
        session.version  # noqa: B018 - the first call that reaches the server
    except Exception as exc:  # noqa: BLE001 - gRPC and Spark wrap the server's reasons
        raise SparkUnavailable(
            f"Spark Connect server {mask_master(url)} cannot be used: {job_error(exc)}"
        ) from None
    # Registered after PySpark's hook, so it runs first and leaves the client closed.
    atexit.register(release, session)
    log.debug("Spark Connect session on %s", mask_master(url))
    return session


def release(session) -> None:
    """Release the server's session within RELEASE_TIMEOUT and close the channel."""
    client = session.client
    if client.is_closed:
        return

    def release_on_server() -> None:
        with contextlib.suppress(Exception):  # best effort: the server may be gone
            client.release_session()

    releasing = threading.Thread(target=release_on_server, name="connect-release", daemon=True)
    releasing.start()
    releasing.join(RELEASE_TIMEOUT)
    with contextlib.suppress(Exception):
        client.close()
