"""``execute FILE.sql...``: run SQL scripts on the root and queue them for every node."""

from __future__ import annotations

from pgferry.cli.nodecommon import local_tx, start
from pgferry.cli.registry import Context, command
from pgferry.node import connect
from pgferry.scripts.execute import execute_on_root, load_script


@command("execute", "run SQL files on the root and replay them on every node")
def cmd_execute(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("FILE.sql... [--force]")
    parser.add_argument("files", nargs="+")
    parser.add_argument(
        "--force", action="store_true", help="run again even if a file of this name ran before"
    )
    args = parser.parse_args(argv)
    scripts = [load_script(path) for path in args.files]
    config = start(ctx)
    with local_tx(config) as conn:
        for message in execute_on_root(conn, connect.queue_name(config), scripts, force=args.force):
            print(message)
    return 0
