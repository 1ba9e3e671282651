"""Queue commands: ``install`` (the SQL schemas) and read-only ``queues`` / ``consumers``
(a table, or ``--json``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

from pgferry import settings
from pgferry.cli.output import print_json, print_table
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
    connstr = config.get(settings.DB)
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


# Rates are estimates from two ticks: a tenth of an event per second is plenty.
RATE_COLUMNS = ("ev_per_sec",)


def _show(
    ctx: Context,
    columns: tuple[str, ...],
    read: Callable[[psycopg.Connection], list[dict[str, Any]]],
    as_json: bool,
) -> None:
    """``columns`` of the rows ``read`` returns: a table, or with ``as_json`` a JSON list of
    objects (intervals in seconds, rates rounded as in the table)."""
    config = ctx.config()
    with connection(config.get(settings.DB)) as conn:
        if not queue_api.installed(conn):
            raise PgferryError(f"{describe(config.get(settings.DB))}: ferry_queue is not installed")
        rows = [{c: _value(c, row[c], as_json) for c in columns} for row in read(conn)]
    if as_json:
        print_json(rows)
    else:
        print_table(list(columns), [tuple(row.values()) for row in rows])


def _value(column: str, value: Any, as_json: bool) -> Any:
    if value is None:
        return None
    if column in RATE_COLUMNS:
        return round(value, 1) if as_json else f"{value:.1f}"
    if as_json and isinstance(value, timedelta):
        return round(value.total_seconds(), 3)
    return value


@command("queues", "show queues: ticks, lag, events per second")
def cmd_queues(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[QUEUE] [--json]", "Show queue information.")
    parser.add_argument("queue", nargs="?")
    parser.add_argument("--json", action="store_true", help="a JSON list (intervals in seconds)")
    args = parser.parse_args(argv)
    _show(ctx, QUEUE_COLUMNS, lambda conn: queue_api.queue_info(conn, args.queue), args.json)
    return 0


@command("consumers", "show consumers: lag, last tick, pending events")
def cmd_consumers(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[QUEUE [CONSUMER]] [--json]", "Show consumer information.")
    parser.add_argument("queue", nargs="?")
    parser.add_argument("consumer", nargs="?")
    parser.add_argument("--json", action="store_true", help="a JSON list (intervals in seconds)")
    args = parser.parse_args(argv)
    _show(
        ctx,
        CONSUMER_COLUMNS,
        lambda conn: queue_api.consumer_info(conn, args.queue, args.consumer),
        args.json,
    )
    return 0
