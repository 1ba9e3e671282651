"""Node commands: create-root, create-branch, create-leaf, members, status, node-info."""

from __future__ import annotations

import logging
import sys

from pgferry.cli import output
from pgferry.cli.connstr_arg import has_password, read_connstr, without_password
from pgferry.cli.nodecommon import local_tx, start
from pgferry.cli.registry import Context, command
from pgferry.db import mask_connstr
from pgferry.node import connect, model, setup, status

log = logging.getLogger(__name__)


def _create(ctx: Context, argv: list[str], node_type: str) -> int:
    parser = ctx.parser(
        "NODE [PUBLIC_CONNSTR]" + ("" if node_type == "root" else " --provider=CONNSTR")
    )
    parser.add_argument("node", nargs="?", metavar="NODE")
    parser.add_argument(
        "location", nargs="?", metavar="PUBLIC_CONNSTR", help="a connect string, @FILE or env:NAME"
    )
    if node_type != "root":
        parser.add_argument(
            "--provider",
            metavar="CONNSTR",
            help="connect string of the provider node (or @FILE, env:NAME)",
        )
    if node_type == "branch":
        parser.add_argument(
            "--sync-watermark",
            metavar="NODE[,NODE...]",
            help="keep this branch's watermark in sync with these nodes (so that they can"
            " take each other's subscribers)",
        )
    if node_type == "leaf":
        parser.add_argument(
            "--merge", metavar="QUEUE", help="feed the merged set QUEUE with this partition"
        )
    parser.add_argument("--nocheck", action="store_true", help="skip the public connstr check")
    args = parser.parse_args(argv)
    config = start(ctx)
    command = f"create-{node_type}"
    provider = getattr(args, "provider", None)
    if provider is not None:  # used to connect, never stored
        provider = read_connstr(provider, f"{command}: --provider").text
    req = setup.build_request(
        config,
        node_type,
        args.node,
        _public_location(args.location, command),
        provider,
        check_location=not args.nocheck,
        sync_watermark=getattr(args, "sync_watermark", None),
        merge=getattr(args, "merge", None),
    )
    setup.create_node(config, req)
    return 0


def _public_location(value: str | None, command: str) -> str | None:
    """PUBLIC_CONNSTR as it will be stored in the node tables of every member.

    Read from a file or the environment, it is stored without its password: the
    other nodes (and the public connstr check) then take it from their ``.pgpass``,
    ``PGPASSWORD`` or service file.  Written in argv, it is stored as given, as londiste3
    does, with a warning when it holds a password.
    """
    if value is None:
        return None
    arg = read_connstr(value, f"{command}: PUBLIC_CONNSTR")
    if not has_password(arg.text):
        return arg.text
    if arg.indirect:
        log.info("%s: the public connect string is stored without its password", command)
        return without_password(arg.text, f"{command}: PUBLIC_CONNSTR")
    log.warning(
        "%s: the public connect string's password is stored in the node tables of every"
        " member (give it as @FILE or env:NAME to keep it out of them and of argv)",
        command,
    )
    return arg.text


@command("create-root", "make this database the root node of the queue")
def cmd_create_root(ctx: Context, argv: list[str]) -> int:
    return _create(ctx, argv, "root")


@command("create-branch", "make this database a branch node (full queue copy)")
def cmd_create_branch(ctx: Context, argv: list[str]) -> int:
    return _create(ctx, argv, "branch")


@command("create-leaf", "make this database a leaf node (data only)")
def cmd_create_leaf(ctx: Context, argv: list[str]) -> int:
    return _create(ctx, argv, "leaf")


@command("members", "list the nodes of the cascade (locations without secrets)")
def cmd_members(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--json]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    config = start(ctx)
    with local_tx(config) as conn:
        queue = connect.queue_name(config)
        model.require_node(conn, queue)
        rows = model.members(conn, queue)
    if args.json:
        output.print_json(
            [
                {"node_name": m.node_name, "dead": m.dead, "node_location": m.masked_location}
                for m in rows
            ]
        )
    else:
        output.print_table(
            ["node_name", "dead", "node_location"],
            [(m.node_name, m.dead, m.masked_location) for m in rows],
        )
    return 0


@command(
    "status",
    "show the cascade tree with lag, tick, table states and errors;"
    " exit 1 when a member is unreachable or in error",
)
def cmd_status(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--json] [--dead=NODE]...")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--dead", action="append", default=[], help="treat NODE as dead for this call"
    )
    args = parser.parse_args(argv)
    config = start(ctx)
    with local_tx(config) as conn:
        report = status.gather(config, conn, frozenset(args.dead))
    if args.json:
        output.print_json(report.to_json())
    else:
        print(status.render_tree(report))
    problems = report.problems()
    if problems:
        # After the tree, on stderr: the exit code a monitor reads, and why.
        print(f"pgferry: status: {'; '.join(problems)}", file=sys.stderr)
        return 1
    return 0


@command("node-info", "show the local node: name, type, queue, provider, locations")
def cmd_node_info(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--json]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    config = start(ctx)
    queue = connect.queue_name(config)
    with local_tx(config) as conn:
        node = model.require_node(conn, queue)
        state = model.local_state(conn, queue, node.worker_name)
    flags = []
    if state is not None:
        if state.paused:
            flags.append("PAUSED")
        if not state.uptodate:
            flags.append("NON-UP-TO-DATE")
        if state.cur_error:
            flags.append("ERROR")
    info = {
        "node_name": node.node_name,
        "node_type": node.node_type,
        "queue_name": queue,
        "status": " ".join(flags) or "OK",
        "worker_name": node.worker_name,
        "provider_node": node.provider_node,
        "local_location": mask_connstr(connect.local_connstr(config)),
        "public_location": mask_connstr(node.location or ""),
        "provider_location": mask_connstr(node.provider_location or "") or None,
        "combined_queue": node.combined_queue,
        "last_tick": state.last_tick_id if state else None,
        "error": state.cur_error if state else None,
    }
    if args.json:
        output.print_json(info)
    else:
        width = max(map(len, info))
        for key, value in info.items():
            print(f"{key.ljust(width)} : {'' if value is None else value}")
    return 0
