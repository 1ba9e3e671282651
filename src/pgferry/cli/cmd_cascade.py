"""Cascade commands: pause, resume, tag-dead, tag-alive, drop-node, change-provider,
takeover, resurrect, wait-root and wait-provider."""

from __future__ import annotations

import argparse
from pathlib import Path

from pgferry.cli.nodecommon import start
from pgferry.cli.registry import Context, command
from pgferry.node import cascade, provider, resurrect, takeover, waits


def _load(ctx: Context, args: argparse.Namespace) -> cascade.Cascade:
    config = start(ctx)
    return cascade.load(config, frozenset(getattr(args, "dead", None) or ()))


def _dead_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dead", action="append", default=[], metavar="NODE", help="treat NODE as dead"
    )


def _pause(ctx: Context, argv: list[str], paused: bool) -> int:
    parser = ctx.parser("[--node=NODE]")
    parser.add_argument("--node", help="the node to act on (default: the local node)")
    parser.add_argument("--consumer", help="accepted for compatibility; the node's worker is meant")
    parser.add_argument(
        "--wait",
        type=float,
        default=0,
        metavar="S",
        help="wait up to S seconds for the worker to see the change",
    )
    args = parser.parse_args(argv)
    c = _load(ctx, args)
    name = args.node or c.local.node_name
    changed = cascade.set_paused(c, name, paused)
    word = "paused" if paused else "resumed"
    print(f"Node {name} {word}" if changed else f"Node {name} was already {word}")
    if args.wait > 0 and changed:
        import time

        deadline = time.monotonic() + args.wait
        while not cascade.worker_acknowledged(c, name):
            if time.monotonic() >= deadline:
                print(f"Worker of node {name} has not confirmed yet (is it running?)")
                return 1
            time.sleep(0.2)
        print(f"Worker of node {name} confirmed")
    return 0


@command("pause", "pause a node's worker (no batch is applied until resume)")
def cmd_pause(ctx: Context, argv: list[str]) -> int:
    return _pause(ctx, argv, True)


@command("resume", "resume a paused node's worker")
def cmd_resume(ctx: Context, argv: list[str]) -> int:
    return _pause(ctx, argv, False)


def _tag(ctx: Context, argv: list[str], dead: bool) -> int:
    parser = ctx.parser("NODE")
    parser.add_argument("node", metavar="NODE")
    if dead:
        _dead_option(parser)
    args = parser.parse_args(argv)
    c = _load(ctx, args)
    failed = cascade.tag(c, args.node, dead)
    print(f"Node {args.node} tagged {'dead' if dead else 'alive'}")
    if failed:
        print(f"Not told (unreachable): {', '.join(failed)}")
    return 0


@command("tag-dead", "mark a node dead on every live member")
def cmd_tag_dead(ctx: Context, argv: list[str]) -> int:
    return _tag(ctx, argv, True)


@command("tag-alive", "mark a dead node alive again on every live member")
def cmd_tag_alive(ctx: Context, argv: list[str]) -> int:
    return _tag(ctx, argv, False)


@command("drop-node", "remove a node (without subscribers) from the cascade")
def cmd_drop_node(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("NODE [--dead=NODE]...")
    parser.add_argument("node", metavar="NODE")
    _dead_option(parser)
    args = parser.parse_args(argv)
    c = _load(ctx, args)
    cascade.drop_node(c, args.node)
    print(f"Node {args.node} dropped")
    return 0


@command("change-provider", "move a node under another provider node")
def cmd_change_provider(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("--provider=NODE [--node=NODE] [--dead=NODE]... [--timeout=S]")
    parser.add_argument("--provider", required=True, metavar="NODE", help="new provider node")
    parser.add_argument("--node", help="the node to move (default: the local node)")
    parser.add_argument("--consumer", help="accepted for compatibility; ignored")
    parser.add_argument(
        "--timeout",
        type=float,
        default=60,
        metavar="S",
        help="how long to wait for the new provider to reach the node's tick",
    )
    _dead_option(parser)
    args = parser.parse_args(argv)
    c = _load(ctx, args)
    name = args.node or c.local.node_name
    if provider.change_provider(c, name, args.provider, timeout=args.timeout):
        print(f"Node {name} now reads from {args.provider}")
    else:
        print(f"Node {name} already reads from {args.provider}")
    return 0


@command("takeover", "take over the role of another node (switchover or failover)")
def cmd_takeover(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("OLD_NODE [--all] [--dead-root|--dead-branch] [--dead=NODE]...")
    parser.add_argument("old", metavar="OLD_NODE")
    parser.add_argument("--all", action="store_true", help="also move OLD_NODE's subscribers")
    parser.add_argument("--dead-root", action="store_true", help="OLD_NODE is a dead root")
    parser.add_argument("--dead-branch", action="store_true", help="OLD_NODE is a dead branch")
    parser.add_argument("--target", help="accepted for compatibility; ignored")
    parser.add_argument(
        "--timeout", type=float, default=120, metavar="S", help="how long to wait for catch-up"
    )
    _dead_option(parser)
    args = parser.parse_args(argv)
    c = _load(ctx, args)
    dead = args.dead_root or args.dead_branch or args.old in args.dead
    result = takeover.takeover(c, args.old, dead=dead, move_all=args.all, timeout=args.timeout)
    print(result)
    return 0


@command("resurrect", "make an old root that was failed over ready to rejoin the cascade")
def cmd_resurrect(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--dump=PATH] [--keep-tables] [--dead=NODE]...")
    parser.add_argument(
        "--dump",
        default=resurrect.DEFAULT_DUMP,
        metavar="PATH",
        help=f"file for the events the cascade never got (default: ./{resurrect.DEFAULT_DUMP})",
    )
    parser.add_argument(
        "--keep-tables",
        action="store_true",
        help="leave the tables as they are (the lost changes stay in them) instead of"
        " copying them again when the node rejoins",
    )
    _dead_option(parser)
    args = parser.parse_args(argv)
    c = _load(ctx, args)
    done = resurrect.resurrect(c, Path(args.dump).absolute(), keep_tables=args.keep_tables)
    me = c.local.node_name
    print(f"Lost events: {done.events} (after tick {done.lost_after}) written to {done.path}")
    tables = (
        f"its {done.copies} tables are copied again when it rejoins"
        if done.copies
        else "its tables are left as they are"
    )
    print(
        f"Node {me} is a branch without provider at tick {done.tick}; {tables}."
        f" Rejoin: change-provider --provider={done.new_root}"
    )
    if done.stranded:
        print(f"Still reading from {me} (not moved by the failover): {', '.join(done.stranded)}")
    return 0


def _wait(ctx: Context, argv: list[str], root: bool) -> int:
    parser = ctx.parser("[--timeout=S] [--poll=S]")
    parser.add_argument(
        "--timeout", type=float, default=0, metavar="S", help="give up after S seconds"
    )
    parser.add_argument("--poll", type=float, default=0.5, metavar="S", help="poll interval")
    args = parser.parse_args(argv)
    c = _load(ctx, args)
    if root:
        other, tick = waits.wait_root(c, args.timeout, args.poll)
    else:
        other, tick = waits.wait_provider(c, args.timeout, args.poll)
    print(f"Node {c.local.node_name} has applied tick {tick} of {other}")
    return 0


@command("wait-root", "wait until the local node has applied the root's last tick")
def cmd_wait_root(ctx: Context, argv: list[str]) -> int:
    return _wait(ctx, argv, True)


@command("wait-provider", "wait until the local node has applied its provider's last tick")
def cmd_wait_provider(ctx: Context, argv: list[str]) -> int:
    return _wait(ctx, argv, False)
