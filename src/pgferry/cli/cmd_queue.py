"""Queue commands: ``install`` (the SQL schemas) and read-only ``queues`` / ``consumers``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from pgferry.cli.output import print_table
from pgferry.cli.registry import Context, command
from pgferry.db import connection, describe
from pgferry.errors import PgferryError
from pgferry.queue import api as queue_api

# What ``queues`` and ``consumers`` show, in this order.
QUEUE_COLUMNS = (
    "queue_name",
    "last_tick_id",
    "ticker_lag",
    "ev_per_sec",
    "ev_new",
    "queue_cur_table",
    "queue_ticker_max_count",
    "queue_ticker_max_lag",
    "queue_ticker_idle_period",
    "queue_ticker_paused",
    "queue_external_ticker",
)
CONSUMER_COLUMNS = (
    "queue_name",
    "consumer_name",
    "lag",
    "last_seen",
    "last_tick",
    "current_batch",
    "next_tick",
    "pending_events",
)


@command("install", "install or upgrade pgferry's SQL schemas in the node database")
def cmd_install(ctx: Context, argv: list[str]) -> int:
    from pgferry import schema

    parser = ctx.parser("[--all]", "Install the queue schema (with --all: every schema).")
    parser.add_argument("--all", action="store_true", help="also the node and ferry schemas")
    args = parser.parse_args(argv)
    config = ctx.config()
    connstr = config.get("db")
    components = ("ferry",) if args.all else ("queue",)
    with connection(connstr) as conn:
        applied = schema.install(conn, components)
        versions = schema.installed_versions(conn)
    if not ctx.quiet:
        for item in applied:
            print(f"Installing {item}")
        if not applied:
            print(f"{describe(connstr)}: up to date")
        print("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    return 0


def _queue_rows(
    ctx: Context,
    columns: tuple[str, ...],
    read: Callable[[psycopg.Connection], list[dict[str, Any]]],
) -> tuple[list[str], list[tuple]]:
    """``columns`` of the rows ``read`` returns, for a table."""
    config = ctx.config()
    with connection(config.get("db")) as conn:
        if not queue_api.installed(conn):
            raise PgferryError(f"{describe(config.get('db'))}: ferry_queue is not installed")
        return list(columns), [tuple(row[c] for c in columns) for row in read(conn)]


@command("queues", "show queues: ticks, lag, events per second")
def cmd_queues(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[QUEUE]", "Show queue information.")
    parser.add_argument("queue", nargs="?")
    args = parser.parse_args(argv)
    headers, rows = _queue_rows(
        ctx, QUEUE_COLUMNS, lambda conn: queue_api.queue_info(conn, args.queue)
    )
    print_table(headers, rows)
    return 0


@command("consumers", "show consumers: lag, last tick, pending events")
def cmd_consumers(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[QUEUE [CONSUMER]]", "Show consumer information.")
    parser.add_argument("queue", nargs="?")
    parser.add_argument("consumer", nargs="?")
    args = parser.parse_args(argv)
    headers, rows = _queue_rows(
        ctx,
        CONSUMER_COLUMNS,
        lambda conn: queue_api.consumer_info(conn, args.queue, args.consumer),
    )
    print_table(headers, rows)
    return 0
