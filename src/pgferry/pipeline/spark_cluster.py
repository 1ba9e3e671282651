"""What pgferry asks of a Spark master before it relies on it: reachable, and cores in time.

A session on a cluster (``spark_master = spark://host:7077``) only registers an application
with the master; the application gets executors when the master has free cores for it.  On
a cluster shared by the worker and the commands of the same node, the commands would
otherwise wait without end (the application stays WAITING while another one holds every
core), and a master that cannot be reached would show up as a Java stack after a minute of
retries.  So, on the driver:

* :func:`check_master` refuses what a SparkContext cannot use (Spark Connect: see
  :mod:`.spark_connect` for the commands that can) and tries the
  master's port before a JVM is started, so an unreachable master is one line at once;
* :func:`wait_for_executors` waits a bounded time (``spark_wait``) for the application's
  first executor, and otherwise names the master, the waiting application and, from the
  standalone master's JSON page (``spark_master_ui``), the applications holding the cores.

Every text that names a master goes through :func:`mask_master`: a Spark Connect URL may
carry a token.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
import urllib.request
from typing import TYPE_CHECKING

from pgferry.errors import SparkUnavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Seconds to wait for the master's port to accept a connection: a master on the network
# answers in milliseconds; an address that drops packets would otherwise hang the start.
PROBE_TIMEOUT = 5.0
# Seconds for the master's JSON page, read only to say who holds the cores.
UI_TIMEOUT = 3.0
# How often the wait for executors looks again (a py4j call each time: cheap).
EXECUTOR_POLL = 0.2
STANDALONE_UI_PORT = 8080  # the standalone master's default web UI port

CONNECT_REFUSED = (
    "Spark Connect ({what}) is not supported by the worker: its copy and replay run RDD"
    " tasks, which Spark Connect does not offer; name a standalone master"
    " (spark_master = spark://host:7077) or local[N] (spark_remote serves compare, repair"
    " and diff)"
)

_SECRET = re.compile(r"(;\s*(?:token|password|[\w-]*secret[\w-]*)\s*=)[^;]*", re.I)
_USERINFO = re.compile(r"^(\w+://)[^/@]*@")


def mask_master(master: str) -> str:
    """``master`` with any token or user:password part replaced by ``[...]``."""
    return _USERINFO.sub(r"\1[...]@", _SECRET.sub(r"\1[...]", master.strip()))


def is_remote(master: str) -> bool:
    """Whether ``master`` names a Spark Connect server (``sc://``, also misspelt)."""
    return master.strip().lower().startswith("sc:")


def is_local(master: str) -> bool:
    """Whether ``master`` runs the executors inside the driver's JVM."""
    return master.strip().startswith("local")


def check_master(master: str, settings: dict[str, str], environ: dict[str, str]) -> None:
    """Refuse a master pgferry cannot use, and one whose port does not answer.

    Raises :class:`SparkUnavailable` with one line naming the (masked) master.
    """
    remote = settings.get("spark.remote") or environ.get("SPARK_REMOTE")
    if is_remote(master) or remote:
        raise SparkUnavailable(CONNECT_REFUSED.format(what=mask_master(remote or master)))
    if not master.startswith("spark://"):
        return  # local[N], yarn, k8s://...: nothing to try before the start
    errors = []
    for host, port in _endpoints(master):
        try:
            with socket.create_connection((host, port), timeout=PROBE_TIMEOUT):
                return
        except OSError as exc:
            errors.append(exc.strerror or exc.__class__.__name__)
    reason = errors[0] if errors else "no host:port in it"
    raise SparkUnavailable(f"Spark master {mask_master(master)} cannot be reached: {reason}")


def _endpoints(master: str) -> list[tuple[str, int]]:
    """The host:port pairs of ``spark://h1:p1,h2:p2`` (standby masters included)."""
    found = []
    for part in master[len("spark://") :].split(","):
        host, _, port = part.strip().rstrip("/").rpartition(":")
        with contextlib.suppress(ValueError):
            found.append((host.strip("[]") or part, int(port)))
    return found


def master_ui(master: str, configured: str | None) -> str | None:
    """The standalone master's web UI: ``spark_master_ui``, else its default port."""
    if configured:
        return configured.rstrip("/")
    endpoints = _endpoints(master) if master.startswith("spark://") else []
    if not endpoints:
        return None
    return f"http://{endpoints[0][0]}:{STANDALONE_UI_PORT}"


def executors(session: SparkSession) -> int:
    """Executors the application holds now (the driver not counted)."""
    return int(session.sparkContext._jsc.sc().getExecutorIds().size())


def wait_for_executors(
    session: SparkSession, master: str, timeout: float, ui: str | None = None
) -> None:
    """Return once the application has an executor; raise :class:`SparkUnavailable` after
    ``timeout`` seconds, or as soon as Spark gave the application up."""
    sc = session.sparkContext
    jsc = sc._jsc.sc()
    deadline = time.monotonic() + max(timeout, 0.0)
    app = f"{sc.appName} ({sc.applicationId})"
    while True:
        if jsc.isStopped():
            raise SparkUnavailable(
                f"Spark master {mask_master(master)} dropped application {app}"
                " (see the master's log)"
            )
        if jsc.getExecutorIds().size() > 0:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(EXECUTOR_POLL)
    holders = core_holders(master_ui(master, ui), sc.applicationId)
    held = f"; cores held by {holders}" if holders else ""
    raise SparkUnavailable(
        f"Spark master {mask_master(master)} gave application {app} no executor in"
        f" {timeout:g} s{held} (spark_wait sets how long to wait)"
    )


def core_holders(ui: str | None, own_id: str) -> str:
    """The other running applications and their cores, from the master's JSON page
    ("" when it cannot be read: the message goes out without them)."""
    if not ui:
        return ""
    try:
        with urllib.request.urlopen(f"{ui}/json/", timeout=UI_TIMEOUT) as resp:
            page = json.load(resp)
    except (OSError, ValueError):
        return ""
    held = [
        f"{app.get('name')} ({app.get('id')}, {app.get('cores', 0)} cores)"
        for app in page.get("activeapps", [])
        if app.get("id") != own_id and int(app.get("cores") or 0) > 0
    ]
    free = int(page.get("cores") or 0) - int(page.get("coresused") or 0)
    if not held:
        return ""
    return ", ".join(held) + f", {free} of {page.get('cores', 0)} free"
