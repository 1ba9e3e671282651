"""Queue commands: ``install`` (the SQL schemas) and read-only ``queues`` / ``consumers``."""

from __future__ import annotations

from pgferry.cli.output import print_table
from pgferry.cli.registry import Context, command
from pgferry.db import connection, describe
from pgferry.errors import PgferryError


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


def _queue_rows(ctx: Context, query: str, params: tuple) -> tuple[list[str], list[tuple]]:
    config = ctx.config()
    with connection(config.get("db")) as conn:
        exists = conn.execute("select to_regnamespace('ferry_queue') is not null").fetchone()
        if not exists or not exists[0]:
            raise PgferryError(f"{describe(config.get('db'))}: ferry_queue is not installed")
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        headers = [col.name for col in cur.description or ()]
        return headers, cur.fetchall()


@command("queues", "show queues: ticks, lag, events per second")
def cmd_queues(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[QUEUE]", "Show queue information.")
    parser.add_argument("queue", nargs="?")
    args = parser.parse_args(argv)
    cols = (
        "queue_name, last_tick_id, ticker_lag, ev_per_sec, ev_new, queue_cur_table,"
        " queue_ticker_max_count, queue_ticker_max_lag, queue_ticker_idle_period,"
        " queue_ticker_paused, queue_external_ticker"
    )
    if args.queue:
        query = f"select {cols} from ferry_queue.get_queue_info(%s)"
        params: tuple = (args.queue,)
    else:
        query, params = f"select {cols} from ferry_queue.get_queue_info()", ()
    headers, rows = _queue_rows(ctx, query, params)
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
        "select queue_name, consumer_name, lag, last_seen, last_tick, current_batch,"
        " next_tick, pending_events from ferry_queue.get_consumer_info(%s, %s)",
        (args.queue, args.consumer),
    )
    print_table(headers, rows)
    return 0
