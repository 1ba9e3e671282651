"""Table handlers: ``show-handlers [NAME...]`` and ``change-handler TABLE --handler=...``."""

from __future__ import annotations

import inspect
import logging

from pgferry.cli import output
from pgferry.cli.nodecommon import local_tx, start
from pgferry.cli.registry import Context, command
from pgferry.handlers import registry as handler_registry
from pgferry.log import setup_logging
from pgferry.node import handlerops
from pgferry.settings import HANDLER_MODULES

log = logging.getLogger(__name__)


@command("show-handlers", "list table handlers with their arguments")
def cmd_show_handlers(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[NAME...] [--json]")
    parser.add_argument("names", nargs="*", metavar="NAME")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    config = ctx.config()  # for handler_modules; no database is needed
    setup_logging(config=config, verbose=ctx.verbose, quiet=ctx.quiet)
    handler_registry.use_modules(config.get(HANDLER_MODULES))
    known = handler_registry.available()
    names = [handler_registry.lookup(n).name for n in args.names] or list(known)
    aliases = {n: [a for a, t in handler_registry.ALIASES.items() if t == n] for n in names}
    if args.json:
        output.print_json(
            [
                {
                    "name": n,
                    "aliases": aliases[n],
                    "origin": known[n].origin,
                    "summary": known[n].cls.summary(),
                    "doc": inspect.getdoc(known[n].cls) or "",
                    "needs_table": known[n].cls.needs_table,
                    "mode": known[n].cls.mode,
                    "arguments": [
                        {
                            "name": p.name,
                            "type": p.kind.__name__,
                            "default": p.default,
                            "required": p.required,
                            "choices": list(p.choices),
                            "aliases": list(p.aliases),
                            "doc": p.doc,
                        }
                        for p in known[n].cls.params
                        if not p.computed
                    ],
                }
                for n in names
            ]
        )
        return 0
    if not args.names:
        output.print_table(
            ["handler", "arguments", "description"],
            [
                (
                    n + "".join(f" ({a})" for a in aliases[n]),
                    " ".join(p.usage() for p in known[n].cls.params if not p.computed),
                    known[n].cls.summary()
                    + ("" if known[n].origin == "built-in" else f" [{known[n].origin}]"),
                )
                for n in names
            ],
        )
        return 0
    for i, n in enumerate(names):
        cls = known[n]
        if i:
            print()
        also = f" (also: {', '.join(aliases[n])})" if aliases[n] else ""
        print(f"{n}{also} - {cls.origin}")
        print()
        print(inspect.getdoc(cls.cls) or "")
        if cls.cls.params:
            print()
            output.print_table(
                ["argument", "type", "default", "description"],
                [
                    (
                        p.name + "".join(f", {a}" for a in p.aliases),
                        p.kind.__name__ + (f" ({'/'.join(p.choices)})" if p.choices else ""),
                        "(required)" if p.required else p.usage().partition("=")[2] or "-",
                        p.doc,
                    )
                    for p in cls.cls.params
                    if not p.computed
                ],
            )
    return 0


@command("change-handler", "replace a table's handler on this node")
def cmd_change_handler(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser(
        "TABLE --handler=NAME [--handler-arg=K=V ...] [--trigger-flags=F] [--trigger-arg=A ...]"
    )
    parser.add_argument("table", metavar="TABLE")
    parser.add_argument("--handler", metavar="NAME", required=True, help="the new handler")
    parser.add_argument(
        "--handler-arg", action="append", default=[], metavar="K=V", help="handler argument"
    )
    parser.add_argument(
        "--trigger-flags", metavar="FLAGS", help="new capture trigger flags (root): I U D B A S"
    )
    parser.add_argument(
        "--trigger-arg",
        action="append",
        metavar="ARG",
        help="new capture options (root), repeatable; replace the stored ones",
    )
    args = parser.parse_args(argv)
    config = start(ctx)
    trigger_args = None if args.trigger_arg is None else tuple(args.trigger_arg)
    with local_tx(config) as conn:
        handlerops.change_handler(
            config,
            conn,
            args.table,
            args.handler,
            args.handler_arg,
            args.trigger_flags,
            trigger_args,
        )
    return 0
