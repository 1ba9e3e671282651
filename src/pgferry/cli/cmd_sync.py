"""``compare [TABLE...]`` and ``repair [TABLE...] [--apply]`` in a node config.

Tables come from this node's registry with their destination names and copy conditions
(the condition filters the source side only: the subscriber's table holds just the matching
rows).  Both sides are read at one tick through :mod:`pgferry.sync.point`; ``compare``
exits 1 when any table differs.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pgferry import settings
from pgferry.cli import lake_sync
from pgferry.cli.registry import Context, command
from pgferry.config import Config
from pgferry.errors import TableError
from pgferry.log import setup_logging

log = logging.getLogger(__name__)

DEFAULT_FMT = settings.COMPARE_FMT.fixed
COUNT_FMT = "%(cnt)d rows"  # compare --count-only, as the original printed it


def _tasks(config: Config, names: list[str]):
    from pgferry.db import connection
    from pgferry.handlers import registry as handler_registry
    from pgferry.node import merge
    from pgferry.node.connect import local_connstr, queue_name
    from pgferry.registry.names import parse_pattern, split_qualified
    from pgferry.registry.routes import load_routes
    from pgferry.sync.compare import CompareTask

    with connection(local_connstr(config)) as conn:
        try:
            routes = load_routes(conn, queue_name(config), handler_registry.context(config))
        except TableError:
            conn.rollback()
            _gone_here(conn, queue_name(config))
            raise
        merged = merge.merged_tables(conn, queue_name(config))
    routes = {t: r for t, r in routes.items() if r.handler.needs_table}  # holding rows here
    chosen = [t for t in routes if t not in merged]
    if names:
        patterns = [parse_pattern(n) for n in names]
        chosen = [t for t in routes if any(p.select([split_qualified(t)]) for p in patterns)]
        if not chosen:
            raise TableError(f"Table not found: {', '.join(names)}")
        if merged.intersection(chosen):
            # The table holds the other parts' rows too: repair would delete them.
            raise TableError(
                f"Table {', '.join(sorted(merged.intersection(chosen)))} is merged from"
                " several partitions: compare and repair take one source only"
            )
    elif merged:
        log.info("Merged tables left out: %s", ", ".join(sorted(merged)))
    if not chosen:
        raise TableError("no tables registered on this node")
    not_ok = [t for t in chosen if routes[t].merge_state != "ok"]
    if not_ok:
        raise TableError(f"Table not in sync yet: {', '.join(not_ok)}")
    return [
        CompareTask(
            source_table=t,
            dest_table=routes[t].dest_fq,
            copy_condition=routes[t].source_filter,
            key=routes[t].pk,
            exclude_columns=routes[t].ignored,
        )
        for t in chosen
    ]


def _gone_here(conn, queue: str) -> None:
    """Fail with one line if registered tables are gone from this node's database (dropped
    without ``remove-table``): replay stops at them too, so no sync point can be taken."""
    from pgferry.handlers import registry as handler_registry
    from pgferry.handlers.api import HandlerContext
    from pgferry.node.model import require_node
    from pgferry.registry import entries

    own = HandlerContext()  # only whether each handler keeps a table counts
    gone = [
        e.dest_name
        for e in entries.without_destination(conn, queue)
        if handler_registry.from_attrs(e.table_attrs or {}, own).needs_table
    ]
    if gone:
        node = require_node(conn, queue).node_name
        raise TableError(
            f"table {', '.join(gone)} does not exist on node {node}: remove-table it or add it"
            " back (replay stops at it too)"
        )


def _spark(config: Config, verbose: int):
    """The command's own session: on a cluster it gets an executor within ``spark_wait``
    seconds or fails with one line naming the master (SparkUnavailable)."""
    from pgferry.pipeline.spark import SparkOptions, spark_for

    app = f"pgferry-{config.job_name}-sync"
    options = SparkOptions.from_values(config.values, app, verbose > 1, remote_ok=True)
    return spark_for(options)


def _large(config: Config, tasks, threads: int) -> bool:
    """Whether reading the local tables whole is over the driver's limit. On a cluster
    repair then surely needs Spark, which starts before the sync point (which holds the
    worker) rather than inside it; in local mode (``threads``, where the limit is the rows
    read whole, else the pages) compare's sums narrow the read to the differing ranges."""
    from pgferry.db import connection
    from pgferry.node.connect import local_connstr
    from pgferry.pipeline.tables import resolve_table
    from pgferry.sync.compare import LOCAL_PAGES
    from pgferry.sync.repair_local import LOCAL_MODE_ROWS

    with connection(local_connstr(config)) as conn:
        tables = [resolve_table(conn, t.dest_table) for t in tasks]
    large = max(t.pages for t in tables) > LOCAL_PAGES
    if threads:  # as repair_local.small_read decides for a read of whole tables
        return large and sum(max(t.est_rows, 0) for t in tables) > LOCAL_MODE_ROWS
    return large


def _fmt(config: Config, rows: int, checksum: int, count_only: bool = False) -> str:
    fmt = config.get(settings.COMPARE_FMT)
    if count_only and fmt == DEFAULT_FMT:
        fmt = COUNT_FMT
    values = {"cnt": rows, "chksum": checksum if rows else None}
    try:
        return fmt % values
    except (KeyError, TypeError, ValueError):
        return DEFAULT_FMT % values


def _narrowed(config: Config, tasks, where: str):
    """The tasks with ``where`` added to both sides' conditions, checked first on this
    node's tables as one read-only boolean expression (one line and nothing read if not)."""
    import dataclasses

    from pgferry import expressions
    from pgferry.db import connection
    from pgferry.node.connect import local_connstr
    from pgferry.registry.names import split_qualified

    where = expressions.boolean_expression(where, "--repair-where")
    with connection(local_connstr(config), autocommit=True) as conn:
        for task in tasks:
            schema, name = split_qualified(task.dest_table)
            expressions.check_on_table(conn, schema, name, where, "--repair-where")
    return [
        dataclasses.replace(
            t,
            copy_condition=expressions.conjunction(t.copy_condition, where),
            dest_condition=expressions.conjunction(t.dest_condition, where),
        )
        for t in tasks
    ]


def _present(config: Config, point, tasks: list) -> tuple[list, list[str]]:
    """The tasks whose table both nodes have, and a line for each of the others: a table
    dropped on either node without ``remove-table`` cannot be compared, the others can."""
    from pgferry.db import connection
    from pgferry.node.connect import queue_name
    from pgferry.node.model import require_node

    if not tasks:
        return [], []
    exists = "select to_regclass(%s) is not null"
    # One node at a time: an error is then named after the database it came from.
    with connection(point.provider_dsn, autocommit=True) as provider:
        at_provider = [provider.execute(exists, (t.source_table,)).fetchone()[0] for t in tasks]
    kept, lines = [], []
    with connection(point.local_dsn, autocommit=True) as local:
        node = require_node(local, queue_name(config))
        for task, found in zip(tasks, at_provider, strict=True):
            if not found:
                name, where = task.source_table, node.provider_node
            elif not local.execute(exists, (task.dest_table,)).fetchone()[0]:
                name, where = task.dest_table, node.node_name
            else:
                kept.append(task)
                continue
            lines.append(
                f"{task.dest_table}: table {name} does not exist on node {where}:"
                " remove-table it or add it back"
            )
    return kept, lines


@command("compare", "compare tables with the provider at one tick (exit 1 on difference)")
def cmd_compare(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[TABLE...] [--count-only]")
    parser.add_argument("tables", nargs="*")
    parser.add_argument("--count-only", action="store_true", help="compare row counts only")
    args = parser.parse_args(argv)
    config = ctx.config()
    setup_logging(config=config, verbose=ctx.verbose, quiet=ctx.quiet)
    from pgferry.sync.compare import compare_tables, driver_threads
    from pgferry.sync.point import sync_point

    tasks, lakes = lake_sync.split(config, _tasks(config, args.tables))
    differ = 0
    with sync_point(config) as point:
        log.info("Comparing at tick %s", point.tick_id)
        tasks, missing = _present(config, point, tasks)
        lakes, missing_lakes = _present(config, point, lakes)
        # Tables kept in a lake; Spark only for large ones.
        results = lake_sync.compare(point, lakes, lambda: _spark(config, ctx.verbose))
        if tasks:
            results += compare_tables(
                lambda: _spark(config, ctx.verbose),  # started only on a cluster, if at all
                point.provider_dsn,
                point.local_dsn,
                tasks,
                src_snapshot=point.src_snapshot,
                dst_snapshot=point.dst_snapshot,
                threads=driver_threads(config.values),  # local mode: no Spark at all
                count_only=args.count_only,
            )
    for res in results:
        src = _fmt(config, res.src_rows, res.src_checksum, args.count_only)
        dst = _fmt(config, res.dst_rows, res.dst_checksum, args.count_only)
        print(f"{res.dest_table}: srcdb: {src}")
        print(f"{res.dest_table}: dstdb: {dst}")
        if (res.src_rows, res.src_checksum) != (res.dst_rows, res.dst_checksum) or res.ranges:
            print(f"{res.dest_table}: Results do not match!")
            differ += 1
    for line in missing + missing_lakes:
        print(line)
    return 1 if differ or missing or missing_lakes else 0


@command("repair", "find rows that differ from the provider; write (or --apply) the fix")
def cmd_repair(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[TABLE...] [--apply] [--dir DIR] [--repair-where EXPR]")
    parser.add_argument("tables", nargs="*")
    parser.add_argument("--apply", action="store_true", help="apply the fix on this node")
    parser.add_argument("--dir", default=".", help="where fix.<table>.sql files go")
    parser.add_argument(
        "--repair-where", metavar="EXPR", help="only rows where EXPR holds, on both sides"
    )
    args = parser.parse_args(argv)
    config = ctx.config()
    setup_logging(config=config, verbose=ctx.verbose, quiet=ctx.quiet)
    from pgferry.db import replica_dsn
    from pgferry.sync.compare import compare_tables, driver_threads
    from pgferry.sync.point import sync_point
    from pgferry.sync.repair import repair_tables

    tasks, lakes = lake_sync.split(config, _tasks(config, args.tables))
    if lakes and args.repair_where:
        raise TableError(f"repair: --repair-where is not taken for a lake table "
                         f"({lakes[0].dest_table})")  # fmt: skip
    if args.repair_where:
        tasks = _narrowed(config, tasks, args.repair_where)
    # A table without a key cannot be repaired row by row: compared only, so that the
    # others are still repaired and the run names what needs a resync.
    keyless = [t for t in tasks if not t.key]
    tasks = [t for t in tasks if t.key]
    threads = driver_threads(config.values)
    large = bool(tasks) and _large(config, tasks, threads)
    # On a cluster a large table surely needs Spark: started before the sync point, which
    # holds the worker. In local mode compare's sums (no Spark) narrow it first.
    spark = _spark(config, ctx.verbose) if large and not threads else None

    def session():  # started only when a table needs it
        return spark or _spark(config, ctx.verbose)

    # With --apply the worker holds at the tick until the fix is in (see sync.py).
    with sync_point(config, pause=args.apply) as point:
        # A lake table's fix: one lake commit each, written at the tick.
        results = lake_sync.repair(point, lakes, args.apply, session)
        narrow = keyless + (tasks if large and threads else [])
        compared = {}
        if narrow:
            found = compare_tables(
                session, point.provider_dsn, point.local_dsn, narrow,
                src_snapshot=point.src_snapshot, dst_snapshot=point.dst_snapshot,
                threads=threads,
            )  # fmt: skip
            compared = {c.dest_table: c for c in found}
        # Only compare's differing ranges are read (none when the table matches); a table
        # that differs without a range to show for it is read whole.
        ranges = {
            t.dest_table: c.ranges
            for t in tasks
            if (c := compared.get(t.dest_table)) is not None and (c.ranges or c.matches)
        }
        if tasks:
            results += repair_tables(
                session,
                point.provider_dsn,
                replica_dsn(point.local_dsn),
                tasks,
                fix_dir=Path(args.dir),
                apply=args.apply,
                src_snapshot=point.src_snapshot,
                dst_snapshot=point.dst_snapshot,
                ranges=ranges or None,
                threads=threads,
            )
    unrepaired = [t.dest_table for t in keyless if not compared[t.dest_table].matches]
    for task in keyless:
        if task.dest_table not in unrepaired:
            print(f"{task.dest_table}: no key, matches the provider: nothing to fix")
    total = 0
    for res in results:
        n = res.inserts + res.updates + res.deletes
        total += n
        where = f" ({res.sql_path})" if res.sql_path and n else ""
        state = "applied" if res.applied and n else "to fix"
        print(
            f"{res.dest_table}: {res.inserts} inserts, {res.updates} updates, "
            f"{res.deletes} deletes {state}{where}"
        )
    for table in unrepaired:  # last, where the operator looks
        print(f"{table}: differs and has no key, rows cannot be matched one by one: resync it")
    return 1 if (total and not args.apply) or unrepaired else 0
