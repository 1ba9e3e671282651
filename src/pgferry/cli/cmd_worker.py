"""``pgferry CONFIG.ini worker``: run the node's replication worker.

``-d`` detaches (needs ``pidfile``); ``-s`` / ``-r`` / ``-k`` reach a running worker through
its pidfile (handled by the dispatcher).  ``--rewind`` / ``--reset`` reposition the worker on
its provider once the node's lock is held: rewind to the tick last applied here (after a
restore of the provider's consumer position), reset to the provider's newest tick (skipping
everything in between: tables must be resynced afterwards).  With ``metrics_port`` set,
Prometheus metrics are served from before the worker takes its node (:mod:`pgferry.metrics`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgferry import settings
from pgferry.cli.registry import Context, command
from pgferry.daemon import run_service
from pgferry.log import setup_logging

if TYPE_CHECKING:
    from pgferry.metrics.server import MetricsServer


@command("worker", "run the replication worker of this node (-d to detach)")
def cmd_worker(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--rewind | --reset]")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--rewind", action="store_true", help="restart from the last applied tick")
    group.add_argument("--reset", action="store_true", help="skip to the provider's newest tick")
    args = parser.parse_args(argv)
    from pgferry.metrics.endpoint import endpoint

    config = ctx.config()
    config.get(settings.DB)
    config.get(settings.QUEUE_NAME)
    reposition = "rewind" if args.rewind else "reset" if args.reset else None
    where = endpoint(config)  # a bad setting fails before detaching
    servers: list[MetricsServer] = []

    def make():
        from pgferry.apply.worker import Worker

        server = None
        if where is not None:
            # Imported only when metrics are on: the HTTP server and prometheus_client
            # are about a tenth of a second of a worker's start (before its first batch).
            from pgferry.metrics.server import MetricsServer

            # First the port (after detaching: the server thread lives in the daemon):
            # when it is taken, the start fails here, before the worker exists or holds
            # the node.
            server = MetricsServer(where)
            servers.append(server)
        worker = Worker(
            config,
            verbose=ctx.verbose,
            overrides=ctx.overrides,
            warm_spark=True,
            reposition=reposition,
        )
        if server is not None:
            from pgferry.metrics.worker import watch_worker

            watch_worker(server.registry, worker)
        return worker

    try:
        return run_service(
            make,
            pidfile=config.get(settings.PIDFILE),
            daemonize=ctx.daemon,
            setup_logging=lambda console: setup_logging(
                config=config,
                verbose=ctx.verbose,
                quiet=ctx.quiet,
                console=console,
            ),
        )
    finally:
        for server in servers:
            server.close()
