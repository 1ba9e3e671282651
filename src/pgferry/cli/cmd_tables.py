"""Replication registry commands: add/remove tables and sequences, list them, resync, wait."""

from __future__ import annotations

import logging
import sys
import time

from pgferry.cli import output
from pgferry.cli.nodecommon import local_tx, start
from pgferry.cli.registry import Context, command
from pgferry.errors import PgferryError, UsageError
from pgferry.node import (
    connect,
    copynode,
    model,
    resync,
    seqops,
    status,
    tableops,
    waits,
    worker_health,
)
from pgferry.registry import entries

log = logging.getLogger(__name__)


@command("add-table", "attach tables to the local node")
def cmd_add_table(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("TABLE... [options]")
    parser.add_argument("tables", nargs="*", metavar="TABLE")
    parser.add_argument("--all", action="store_true", help="every table not yet added")
    parser.add_argument("--dest-table", metavar="NAME", help="local table name when different")
    parser.add_argument(
        "--copy-condition", metavar="EXPR", help="WHERE expression filtering copy and replay"
    )
    parser.add_argument("--max-parallel-copy", type=int, metavar="N", help="copy concurrency cap")
    parser.add_argument("--create", action="store_true", help="create missing local table")
    parser.add_argument(
        "--create-full", action="store_true", help="--create with indexes and constraints"
    )
    parser.add_argument("--no-triggers", action="store_true", help="attach without triggers")
    parser.add_argument(
        "--trigger-flags", metavar="FLAGS", help="capture trigger flags (root): I U D B A S"
    )
    parser.add_argument(
        "--trigger-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="capture option (root), repeatable: pkey=, ignore=, when=, backup, ev_extra2..4=",
    )
    parser.add_argument("--skip-truncate", action="store_true", help="copy without TRUNCATE")
    parser.add_argument("--expect-sync", action="store_true", help="no copy: state ok at once")
    parser.add_argument("--force", action="store_true", help="re-add an already added table")
    parser.add_argument("--wait-sync", action="store_true", help="then wait until all ok")
    parser.add_argument("--handler", metavar="NAME", help="table handler (see show-handlers)")
    parser.add_argument(
        "--handler-arg", action="append", default=[], metavar="K=V", help="handler argument"
    )
    _copy_node_options(parser)
    _copy_mode_option(parser)
    parser.add_argument("--merge-all", action="store_true", help="on every part (merge leaf)")
    parser.add_argument("--no-merge", action="store_true", help="this part's own (merge leaf)")
    _skip_option(parser)
    args = parser.parse_args(argv)
    if args.max_parallel_copy is not None and args.max_parallel_copy < 1:
        raise UsageError("add-table: --max-parallel-copy must be at least 1")
    config = start(ctx)
    opts = tableops.AddTableOptions(
        all=args.all,
        dest_table=args.dest_table,
        copy_condition=args.copy_condition,
        max_parallel_copy=args.max_parallel_copy,
        create=args.create or args.create_full,
        create_full=args.create_full,
        no_triggers=args.no_triggers,
        skip_truncate=args.skip_truncate,
        expect_sync=args.expect_sync,
        force=args.force,
        handler=args.handler,
        handler_args=args.handler_arg,
        trigger_flags=args.trigger_flags,
        trigger_args=tuple(args.trigger_arg),
        copy_node=_copy_node(args),
        copy_mode=args.copy_mode,
        merge_all=args.merge_all,
        no_merge=args.no_merge,
        skip_non_existing=args.skip_non_existing,
    )
    with local_tx(config) as conn:
        added = tableops.add_tables(config, conn, args.tables, opts)
    for name in added:
        log.info("Table added: %s", name)
    if args.wait_sync:
        return _wait_sync(ctx, 1.0, None)
    return 0


def _skip_option(parser) -> None:
    parser.add_argument(
        "--skip-non-existing",
        action="store_true",
        help="leave out, with a warning, names missing here or on the provider",
    )


def _copy_node_options(parser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--copy-node", metavar="NODE", help="copy from NODE, not the provider")
    which.add_argument(
        "--find-copy-node", action="store_true", help="copy from the nearest node upstream"
    )


def _copy_mode_option(parser) -> None:
    parser.add_argument(
        "--copy-mode",
        choices=("chunked", "snapshot"),
        help="copy in key-range chunks (no long snapshot) or under one snapshot;"
        " default: by size (copy_snapshot_max)",
    )


def _copy_node(args) -> str | None:
    return copynode.FIND if args.find_copy_node else args.copy_node


@command("remove-table", "detach tables from the local node")
def cmd_remove_table(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("TABLE... [--all] [--force]")
    parser.add_argument("tables", nargs="*", metavar="TABLE")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--force", action="store_true", help="ignore names not added")
    args = parser.parse_args(argv)
    config = start(ctx)
    with local_tx(config) as conn:
        tableops.remove_tables(config, conn, args.tables, args.all, args.force)
    return 0


@command("tables", "list local tables with their state")
def cmd_tables(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--json] [--names-only]")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--names-only", action="store_true")
    args = parser.parse_args(argv)
    config = start(ctx)
    queue = connect.queue_name(config)
    with local_tx(config) as conn:
        node = model.require_node(conn, queue)
        tables = entries.list_tables(conn, queue)
        worker = worker_health.read(conn, queue)
        # A copy does not move while the worker is down: no rate or ETA then.
        down = worker is not None and worker.down(worker_health.down_after(config))
        progress = {
            p.table_name: status.stalled_text(p) if down else p.text()
            for p in entries.copy_progress(conn, queue)
            if p.merge_state in ("in-copy", "catching-up") or p.error  # running or failed
        }
    if args.json:
        output.print_json(
            [
                {
                    "table_name": t.table_name,
                    "merge_state": t.merge_state,
                    "dest_table": t.dest_name,
                    "copy_condition": t.copy_condition,
                    "copy_group": t.copy_group,
                    "max_parallel_copy": t.max_parallel_copy,
                    "skip_truncate": t.skip_truncate,
                    "table_attrs": t.table_attrs,
                }
                for t in tables
            ]
        )
    elif args.names_only:
        for t in tables:
            print(t.table_name)
    else:
        headers = ["table_name", "merge_state", "table_attrs"]
        if progress:  # a copy is waiting, running or catching up: say how far it is
            headers.append("copy")
        output.print_table(
            headers,
            [
                (t.table_name, str(t.merge_state), entries.attrs_text(t.display_attrs()))
                + ((progress.get(t.table_name, ""),) if progress else ())
                for t in tables
            ],
        )
    if down and any(t.merge_state != "ok" for t in tables):
        # Tables wait for a worker that does not run: a monitor must hear of it.
        assert worker is not None
        print(f"pgferry: tables: worker of {node.node_name} down: {worker.line()}", file=sys.stderr)
        return 1
    return 0


@command("seqs", "list sequences with their last value")
def cmd_seqs(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--json]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    config = start(ctx)
    queue = connect.queue_name(config)
    with local_tx(config) as conn:
        model.require_node(conn, queue)
        seqs = entries.list_seqs(conn, queue)
    rows = [(s.seq_name, s.local, s.last_value) for s in seqs]
    if args.json:
        output.print_json(
            [dict(zip(("seq_name", "local", "last_value"), r, strict=True)) for r in rows]
        )
    else:
        output.print_table(["seq_name", "local", "last_value"], rows)
    return 0


@command("missing", "tables and sequences that could be added here")
def cmd_missing(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--json]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    config = start(ctx)
    with local_tx(config) as conn:
        rows = tableops.missing(config, conn)
    if args.json:
        output.print_json([{"obj_kind": k, "obj_name": n} for k, n in rows])
    else:
        output.print_table(["obj_kind", "obj_name"], rows, title="Missing objects on node")
    return 0


@command("add-seq", "attach sequences to the local node")
def cmd_add_seq(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("SEQ... [--all] [--create]")
    parser.add_argument("seqs", nargs="*", metavar="SEQ")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--create", action="store_true")
    parser.add_argument("--create-full", action="store_true")
    parser.add_argument("--force", action="store_true", help="accepted for compatibility")
    _skip_option(parser)
    args = parser.parse_args(argv)
    config = start(ctx)
    with local_tx(config) as conn:
        seqops.add_seqs(
            config,
            conn,
            args.seqs,
            all_=args.all,
            create=args.create or args.create_full,
            skip_non_existing=args.skip_non_existing,
        )
    return 0


@command("remove-seq", "detach sequences from the local node")
def cmd_remove_seq(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("SEQ... [--all]")
    parser.add_argument("seqs", nargs="*", metavar="SEQ")
    parser.add_argument("--all", action="store_true")
    args = parser.parse_args(argv)
    config = start(ctx)
    with local_tx(config) as conn:
        seqops.remove_seqs(config, conn, args.seqs, args.all)
    return 0


@command("resync", "copy tables again from the provider")
def cmd_resync(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser(
        "TABLE... [--all] [--copy-node=NODE | --find-copy-node] [--copy-mode=MODE] [--merge-all]"
    )
    parser.add_argument("tables", nargs="*", metavar="TABLE")
    parser.add_argument("--all", action="store_true")
    _copy_node_options(parser)
    _copy_mode_option(parser)
    parser.add_argument("--merge-all", action="store_true", help="every part (merge leaf)")
    args = parser.parse_args(argv)
    config = start(ctx)
    with local_tx(config) as conn:
        resync.resync(
            config, conn, args.tables, args.all, _copy_node(args), merge_all=args.merge_all,
            copy_mode=args.copy_mode,
        )  # fmt: skip
    return 0


@command("wait-sync", "wait until every local table is in state ok")
def cmd_wait_sync(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[--poll=SECONDS] [--timeout=SECONDS]")
    parser.add_argument("--poll", type=float, default=2.0, help="most seconds between checks")
    parser.add_argument("--timeout", type=float, help="give up after this many seconds")
    args = parser.parse_args(argv)
    start(ctx)
    return _wait_sync(ctx, args.poll, args.timeout)


def _wait_sync(ctx: Context, poll: float, timeout: float | None) -> int:
    config = ctx.config()
    queue = connect.queue_name(config)
    deadline = None if timeout is None else time.monotonic() + timeout
    done: set[str] = set()
    last_msg = None
    # Checks start 0.1 s apart and grow to ``poll``: a small table's copy takes under a
    # second, a large one's minutes.
    interval = min(poll, 0.1)
    ticker = waits.RootTicker(config)  # a copy never ends without the root's ticks
    while True:
        with local_tx(config) as conn:
            model.require_node(conn, queue)
            tables = entries.list_tables(conn, queue)
        pending = [t for t in tables if t.merge_state != "ok"]
        for t in tables:
            if t.merge_state == "ok" and t.table_name not in done:
                if last_msg is not None:
                    log.info("%s: done", t.table_name)
                done.add(t.table_name)
        if not pending:
            ticker.check(now=True)  # fails, naming the ticker, when it counts as stopped
            log.info("All tables in sync")
            return 0
        msg = f"{len(pending)}/{len(tables)} table(s) to copy"
        if msg != last_msg:
            log.info(msg)
            last_msg = msg
        if deadline is not None and time.monotonic() >= deadline:
            raise PgferryError(f"wait-sync: timed out, {msg}")
        ticker.check()
        time.sleep(interval)  # polling the state written by the worker, not synchronising
        interval = min(poll, interval * 2)
