"""The HTTP side of the Prometheus metrics: the server thread answering ``/metrics`` on
the configured endpoint (:mod:`.endpoint`), and the short-timeout connection a scrape
reads a database on.

Each daemon process gets its own :class:`~prometheus_client.CollectorRegistry` (never the
library's global one) and one small HTTP server thread answering ``/metrics``; the
collectors registered in it are :mod:`.worker`'s and :mod:`.ticker`'s.  A scrape reads the
database on a connection of its own with short timeouts, so it never waits on (nor blocks)
the daemon's loop.  The server is started before the daemon takes its lock: a port already
taken is one clear error and nothing else has started.
"""

from __future__ import annotations

import logging
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
from prometheus_client import CollectorRegistry, make_wsgi_app

from pgferry.db import connect
from pgferry.errors import PgferryError
from pgferry.metrics.endpoint import Endpoint

log = logging.getLogger(__name__)

APPLICATION_NAME = "pgferry-metrics"
# A scrape's own database reads: libpq's shortest connect timeout, then this per statement.
CONNECT_TIMEOUT = 2
STATEMENT_TIMEOUT_MS = 2000


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes come every few seconds: they are not logged."""


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class MetricsServer:
    """``/metrics`` of one registry, answered by a daemon thread until :meth:`close`."""

    def __init__(self, where: Endpoint, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.endpoint = where
        try:
            family = socket.getaddrinfo(where.address, where.port, type=socket.SOCK_STREAM)[0][0]
            server_class = type(
                "MetricsHTTPServer", (_ThreadingServer,), {"address_family": family}
            )
            self._httpd = make_server(
                where.address,
                where.port,
                make_wsgi_app(self.registry),
                server_class=server_class,
                handler_class=_QuietHandler,
            )
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise PgferryError(
                f"cannot serve metrics on {where.address}:{where.port}"
                f" (metrics_address / metrics_port): {reason}"
            ) from None
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="pgferry-metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", where.address, self.port)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def scrape_connection(dsn: str) -> psycopg.Connection:
    """A connection for one scrape: autocommit, short connect and statement timeouts."""
    conn = connect(
        dsn, autocommit=True, application_name=APPLICATION_NAME, connect_timeout=CONNECT_TIMEOUT
    )
    conn.execute(f"set statement_timeout = {STATEMENT_TIMEOUT_MS}")
    return conn
