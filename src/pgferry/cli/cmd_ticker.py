"""``pgferry [-d|-s|-r|-k] pgqd.ini ticker``: run the ticker daemon.

Reads a ``[pgqd]`` section (``[pgferry_ticker]`` also accepted); ``-s``/``-r``/``-k`` are
handled by the dispatcher through the pidfile.  With ``metrics_port`` set, Prometheus
metrics are served (:mod:`pgferry.metrics`); the port is read at start, not on reload.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgferry.cli.registry import Context, command
from pgferry.config import TICKER_SECTIONS, load_config
from pgferry.settings import PIDFILE

if TYPE_CHECKING:
    from pgferry.metrics.server import MetricsServer


@command("ticker", "run the ticker daemon (pgqd.ini)", sections=TICKER_SECTIONS)
def cmd_ticker(ctx: Context, argv: list[str]) -> int:
    from pgferry.daemon import run_service
    from pgferry.log import setup_logging
    from pgferry.metrics.endpoint import endpoint
    from pgferry.queue.ticker import TickerService
    from pgferry.queue.ticker_settings import TickerSettings

    ctx.parser("", "Tick every queue database of a cluster.").parse_args(argv)
    config = ctx.config(TICKER_SECTIONS)
    settings = TickerSettings.from_config(config)  # fail before detaching
    where = endpoint(config)
    servers: list[MetricsServer] = []

    def reread() -> TickerSettings:
        assert ctx.config_path is not None
        return TickerSettings.from_config(
            load_config(ctx.config_path, TICKER_SECTIONS, ctx.overrides)
        )

    def logging_setup(console: bool) -> None:
        setup_logging(
            config=config,
            verbose=ctx.verbose,
            quiet=ctx.quiet,
            console=console,
        )

    def make() -> TickerService:
        if where is None:
            return TickerService(settings, reread)
        # The HTTP server and prometheus_client only when metrics are on (a tenth of a
        # second of the daemon's start).
        from pgferry.metrics.server import MetricsServer
        from pgferry.metrics.ticker import watch_ticker

        server = MetricsServer(where)  # a port already taken: the start fails here
        servers.append(server)
        service = TickerService(settings, reread)
        watch_ticker(server.registry, service)
        return service

    try:
        return run_service(
            make,
            pidfile=config.get(PIDFILE),
            daemonize=ctx.daemon,
            setup_logging=logging_setup,
        )
    finally:
        for server in servers:
            server.close()
