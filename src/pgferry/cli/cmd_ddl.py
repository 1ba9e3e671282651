"""``capture-ddl [on|off] [--no-indexes]``: a root's DDL on replicated tables replicates itself."""

from __future__ import annotations

from pgferry.cli.nodecommon import local_tx, start
from pgferry.cli.registry import Context, command
from pgferry.errors import UsageError
from pgferry.node import connect
from pgferry.scripts import ddl_capture


@command("capture-ddl", "queue the root's DDL on replicated tables (on, off; alone: show)")
def cmd_capture_ddl(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[on|off] [--no-indexes]")
    parser.add_argument("switch", nargs="?")
    parser.add_argument(
        "--no-indexes",
        action="store_true",
        help="leave CREATE INDEX / DROP INDEX to each node (captured by default)",
    )
    args = parser.parse_args(argv)
    if args.switch not in (None, "on", "off"):
        raise UsageError(f"capture-ddl: expected on or off, not {args.switch!r}")
    if args.no_indexes and args.switch != "on":
        raise UsageError("capture-ddl: --no-indexes goes with on")
    config = start(ctx)
    queue = connect.queue_name(config)
    with local_tx(config) as conn:
        if args.switch == "on":
            state = ddl_capture.turn_on(conn, queue, indexes=not args.no_indexes)
        elif args.switch == "off":
            state = ddl_capture.turn_off(conn, queue)
        else:
            state = ddl_capture.state(conn, queue)
    for line in state.describe():
        print(line)
    return 0
