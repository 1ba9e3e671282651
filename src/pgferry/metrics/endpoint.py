"""Where ``/metrics`` is served: ``metrics_address`` and ``metrics_port`` read and checked.

Kept apart from :mod:`.server` so that a daemon checks its metrics settings before it
detaches without importing the HTTP server and ``prometheus_client`` (about a tenth of a
second of a worker's start), which it imports only when ``metrics_port`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgferry.config import Config
from pgferry.errors import ConfigError

DEFAULT_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class Endpoint:
    """Where ``/metrics`` is served (``metrics_address``, ``metrics_port``)."""

    address: str
    port: int


def endpoint(config: Config) -> Endpoint | None:
    """The configured endpoint, or None when ``metrics_port`` is not set (the default)."""
    raw = (config.getopt("metrics_port") or "").strip()
    if not raw:
        return None
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise ConfigError(
            f"{config.path}: setting 'metrics_port' must be a port number (1-65535), not {raw!r}"
        )
    address = (config.getopt("metrics_address") or "").strip() or DEFAULT_ADDRESS
    return Endpoint(address, port)
