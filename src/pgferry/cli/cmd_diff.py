"""``pgferry diff``: compare any two tables (and write or apply the fix) without a config file.

    pgferry diff SRC_CONNSTR SRC_TABLE DST_CONNSTR DST_TABLE [--where COND]
                 [--repair FILE] [--apply] [--set spark_master=...] [--set spark.x=...]
                 [--set spark_wait=SECONDS]

Exit status: 0 when the tables match (or the fix was applied), 1 when they differ.
"""

from __future__ import annotations

from pathlib import Path

from pgferry.cli.registry import Context, command
from pgferry.config import parse_set_options
from pgferry.db import connect, describe
from pgferry.errors import UsageError
from pgferry.log import setup_logging


@command("diff", "compare two tables, optionally write/apply the fix", needs_config=False)
def cmd_diff(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser(
        "SRC_CONNSTR SRC_TABLE DST_CONNSTR DST_TABLE [--where COND] [--repair FILE] [--apply]",
        description="Compare two tables with the same columns and primary key.",
    )
    parser.prog = "pgferry diff"
    parser.usage = "pgferry diff " + parser.usage.split(" diff ", 1)[-1]
    parser.add_argument("src_connstr")
    parser.add_argument("src_table")
    parser.add_argument("dst_connstr")
    parser.add_argument("dst_table")
    parser.add_argument("--where", help="WHERE expression applied on both sides")
    parser.add_argument("--repair", metavar="FILE", type=Path, help="write the fix SQL here")
    parser.add_argument("--apply", action="store_true", help="apply the fix (needs --repair)")
    # Global switches written after "diff" reach this parser: accept them here too.
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VAL")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    overrides = {**ctx.overrides, **parse_set_options(args.set)}
    verbose = ctx.verbose + args.verbose
    if args.apply and args.repair is None:
        raise UsageError("pgferry diff: --apply needs --repair FILE")
    setup_logging(verbose=verbose, quiet=ctx.quiet or args.quiet)

    # Check the tables before Spark starts: bad input fails fast with one line.
    from pgferry.pipeline.tables import require_same_columns, resolve_table

    where = None
    if args.where:
        from pgferry import expressions  # pglast: only for a --where

        where = expressions.boolean_expression(args.where, "--where")
    with connect(args.src_connstr, autocommit=True) as conn:
        src = resolve_table(conn, args.src_table, describe(args.src_connstr))
        if where:
            expressions.check_on_table(conn, src.schema, src.name, where, "--where")
    with connect(args.dst_connstr, autocommit=True) as conn:
        dst = resolve_table(conn, args.dst_table, describe(args.dst_connstr))
        if where:
            expressions.check_on_table(conn, dst.schema, dst.name, where, "--where")
    require_same_columns(src, dst)

    from pgferry.pipeline.compare import CompareTask, compare_tables, driver_threads

    def spark():
        """Spark, started only for work that needs it (small tables are compared without)."""
        from pgferry.pipeline.spark import SparkOptions, spark_for

        options = SparkOptions.from_values(overrides, "pgferry-diff", verbose > 1, remote_ok=True)
        return spark_for(options)

    task = CompareTask(src.display, dst.display, where, where)
    threads = driver_threads(overrides)  # small tables: the driver's threads
    (result,) = compare_tables(spark, args.src_connstr, args.dst_connstr, [task], threads=threads)
    for line in result.lines():
        print(line)
    if result.matches:
        return 0
    if args.repair is None:
        return 1

    from pgferry.pipeline.repair import repair_tables

    (fixed,) = repair_tables(
        spark,
        args.src_connstr,
        args.dst_connstr,
        [task],
        fix_dir=args.repair.parent,
        fix_file=args.repair,
        apply=args.apply,
        ranges={task.dest_table: result.ranges},
        threads=threads,
    )
    print(fixed.line())
    return 0 if fixed.applied or (args.apply and not fixed.changes) else 1
