"""``lake-compact [TABLE...] [--keep-hours N]``: compact a lake leaf's tables and vacuum
their history (``docs/lakehouse.md``, *Small files*)."""

from __future__ import annotations

from pgferry import settings
from pgferry.cli.nodecommon import start
from pgferry.cli.registry import Context, command
from pgferry.errors import TableError


@command("lake-compact", "compact the lake tables of a lake leaf and vacuum their history")
def cmd_lake_compact(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[TABLE...] [--keep-hours N]")
    parser.add_argument("tables", nargs="*")
    parser.add_argument(
        "--keep-hours", type=int, help="history kept (default: the ini's lake_keep_hours)"
    )
    args = parser.parse_args(argv)
    config = start(ctx)
    from pgferry.db import connection
    from pgferry.handlers import registry as handler_registry
    from pgferry.handlers.lake import Lake
    from pgferry.lake import formats
    from pgferry.node.connect import local_connstr, queue_name
    from pgferry.registry.names import parse_pattern, split_qualified
    from pgferry.registry.routes import load_routes

    keep = args.keep_hours if args.keep_hours is not None else config.get(settings.LAKE_KEEP_HOURS)
    if keep < 0:
        raise TableError("lake-compact: --keep-hours must not be negative")
    with connection(local_connstr(config)) as conn:
        routes = load_routes(conn, queue_name(config), handler_registry.context(config))
    lakes = {t: r.handler for t, r in routes.items() if isinstance(r.handler, Lake)}
    chosen = list(lakes)
    if args.tables:
        patterns = [parse_pattern(n) for n in args.tables]
        chosen = [t for t in lakes if any(p.select([split_qualified(t)]) for p in patterns)]
    if not chosen:
        raise TableError("lake-compact: no lake table " + ("matches" if args.tables else "here"))
    for table in chosen:
        handler = lakes[table]
        assert isinstance(handler, Lake)
        spec = handler.spec()
        formats.module(spec.format).compact(spec, keep)
        print(f"{table}: compacted {spec.location}, history older than {keep} hours vacuumed")
    return 0
