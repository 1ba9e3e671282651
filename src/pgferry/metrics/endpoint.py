"""Where ``/metrics`` is served: ``metrics_address`` and ``metrics_port`` read and checked.

Kept apart from :mod:`.server` so that a daemon checks its metrics settings before it
detaches without importing the HTTP server and ``prometheus_client`` (about a tenth of a
second of a worker's start), which it imports only when ``metrics_port`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgferry import settings
from pgferry.config import Config

DEFAULT_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class Endpoint:
    """Where ``/metrics`` is served (``metrics_address``, ``metrics_port``)."""

    address: str
    port: int


def endpoint(config: Config) -> Endpoint | None:
    """The configured endpoint, or None when ``metrics_port`` is not set (the default)."""
    port = config.get(settings.METRICS_PORT)
    if port is None:
        return None
    return Endpoint(config.get(settings.METRICS_ADDRESS).strip(), port)
