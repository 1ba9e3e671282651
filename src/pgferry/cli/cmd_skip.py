"""``skip-event [--yes]``: pass over the event this node's worker is stuck on."""

from __future__ import annotations

import sys

from pgferry.cli.nodecommon import local_tx, start
from pgferry.cli.registry import Context, command
from pgferry.errors import PgferryError
from pgferry.node import connect, model
from pgferry.scripts import skip


@command("skip-event", "skip the event this node fails to apply (asks first unless --yes)")
def cmd_skip_event(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--yes]")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    args = parser.parse_args(argv)
    config = start(ctx)
    queue = connect.queue_name(config)
    with local_tx(config) as conn:
        node = model.require_node(conn, queue)
        failed = skip.pending_failure(conn, queue, node.worker_name)
        if failed is None:
            print(f"No failing event recorded on node {node.node_name}: nothing to skip")
            return 0
        print(f"Node {node.node_name} fails on {failed.describe()}")
        print(f"  error: {failed.error}")
        if not args.yes and not _confirm():
            print("Nothing skipped")
            return 1
        skip.mark_skipped(conn, failed, None)
    print(f"Skipped event {failed.ev_id}; the worker applies the rest of the batch next")
    return 0


def _confirm() -> bool:
    if not sys.stdin.isatty():
        raise PgferryError("skip-event: not a terminal; use --yes to confirm")
    answer = input("Skip this event? [y/N] ").strip().lower()
    return answer in ("y", "yes")
