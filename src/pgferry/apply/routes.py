"""The worker's copy of its node's routes (:mod:`pgferry.registry.routes`), read again only
when the registry changed.

Reading every route costs a catalog read per table; the registry's signature, one
statement (read with the loop's other reads, :mod:`pgferry.apply.loop_state`), says when
that is needed.
"""

from __future__ import annotations

import time

import psycopg

from pgferry.handlers.api import HandlerContext
from pgferry.registry.routes import Route, load_routes, registry_signature

ROUTES_MAX_AGE = 30.0  # seconds: DDL on the provider shows up in replay at least this soon


class RouteCache:
    """One node's routes, read again only when the registry changed (its
    :func:`registry_signature`) or the copy is older than :data:`ROUTES_MAX_AGE`."""

    def __init__(self, handlers: HandlerContext) -> None:
        self._handlers = handlers
        self._cached: tuple[str, float, dict[str, Route]] | None = None

    def clear(self) -> None:
        """The next :meth:`get` reads the registry."""
        self._cached = None

    def get(
        self, conn: psycopg.Connection, queue_name: str, signature: str | None = None
    ) -> tuple[dict[str, Route], bool]:
        """The routes, and whether they were read just now (``signature``: the registry's,
        when read already)."""
        if signature is None:
            signature = registry_signature(conn, queue_name)
        cached = self._cached
        fresh_enough = cached is not None and time.monotonic() - cached[1] <= ROUTES_MAX_AGE
        if cached is not None and cached[0] == signature and fresh_enough:
            return cached[2], False
        with conn.transaction():  # a savepoint inside the caller's transaction
            routes = load_routes(conn, queue_name, self._handlers)
            cached = (signature, time.monotonic(), routes)
        self._cached = cached
        return cached[2], True
