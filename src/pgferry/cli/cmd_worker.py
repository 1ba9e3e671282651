"""``pgferry CONFIG.ini worker``: run the node's replication worker.

``-d`` detaches (needs ``pidfile``); ``-s`` / ``-r`` / ``-k`` reach a running worker through
its pidfile (handled by the dispatcher).  ``--rewind`` / ``--reset`` reposition the worker on
its provider before starting: rewind to the tick last applied here (after a restore of the
provider's consumer position), reset to the provider's newest tick (skipping everything in
between: tables must be resynced afterwards).
"""

from __future__ import annotations

from pgferry.cli.registry import Context, command
from pgferry.config import Config
from pgferry.daemon import run_service
from pgferry.errors import NodeError
from pgferry.log import setup_logging


@command("worker", "run the replication worker of this node (-d to detach)")
def cmd_worker(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--rewind | --reset]")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--rewind", action="store_true", help="restart from the last applied tick")
    group.add_argument("--reset", action="store_true", help="skip to the provider's newest tick")
    args = parser.parse_args(argv)
    config = ctx.config()
    config.get("db")
    config.get("queue_name")
    if args.rewind or args.reset:
        setup_logging(logfile=config.getpath("logfile"), verbose=ctx.verbose, quiet=ctx.quiet)
        _reposition(config, reset=args.reset)

    def make():
        from pgferry.replication.worker import Worker

        return Worker(config, verbose=ctx.verbose, overrides=ctx.overrides, warm_spark=True)

    return run_service(
        make,
        pidfile=config.getpath("pidfile"),
        daemonize=ctx.daemon,
        setup_logging=lambda console: setup_logging(
            logfile=config.getpath("logfile"),
            verbose=ctx.verbose,
            quiet=ctx.quiet,
            console=console,
        ),
    )


def _reposition(config: Config, *, reset: bool) -> None:
    import logging

    from pgferry.db import connection
    from pgferry.node.connect import local_connstr, queue_name, remote_connstr
    from pgferry.replication import batches, state

    log = logging.getLogger(__name__)
    queue = queue_name(config)
    with connection(local_connstr(config)) as local:
        node = state.load_node(local, queue)
        if node.node_type == "root" or node.provider_location is None:
            raise NodeError("--rewind / --reset are for branch and leaf nodes")
        with connection(remote_connstr(config, node.provider_location)) as prov:
            tick = batches.last_tick(prov, queue) if reset else node.last_tick_id
            if tick is None:
                raise NodeError("no tick to reposition to")
            prov.execute(
                "select ferry_queue.register_consumer_at(%s, %s, %s)",
                (queue, node.consumer_name, tick),
            )
        if reset:
            local.execute(
                """
                update ferry_node.local_state set last_tick_id = %s
                 where queue_name = %s and consumer_name = %s
                """,
                (tick, queue, node.consumer_name),
            )
    log.info("Consumer %s positioned at tick %s", node.consumer_name, tick)
