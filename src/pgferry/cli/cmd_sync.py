"""``compare [TABLE...]`` and ``repair [TABLE...] [--apply]`` in a node config.

The command line of :mod:`pgferry.sync.run`, which takes the tables from this node's
registry and reads both sides at one tick; here only the arguments and the printing
(``compare_fmt``, the original's layout).  ``compare`` exits 1 when any table differs,
``repair`` when rows are left to fix or a table without a key differs.
"""

from __future__ import annotations

from pathlib import Path

from pgferry import settings
from pgferry.cli.registry import Context, command
from pgferry.config import Config
from pgferry.log import setup_logging
from pgferry.sync.run import compare_node, repair_node

DEFAULT_FMT = settings.COMPARE_FMT.fixed
COUNT_FMT = "%(cnt)d rows"  # compare --count-only, as the original printed it


def _fmt(config: Config, rows: int, checksum: int, count_only: bool = False) -> str:
    fmt = config.get(settings.COMPARE_FMT)
    if count_only and fmt == DEFAULT_FMT:
        fmt = COUNT_FMT
    values = {"cnt": rows, "chksum": checksum if rows else None}
    try:
        return fmt % values
    except (KeyError, TypeError, ValueError):
        return DEFAULT_FMT % values


@command("compare", "compare tables with the provider at one tick (exit 1 on difference)")
def cmd_compare(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser("[TABLE...] [--count-only]")
    parser.add_argument("tables", nargs="*")
    parser.add_argument("--count-only", action="store_true", help="compare row counts only")
    args = parser.parse_args(argv)
    config = ctx.config()
    setup_logging(config=config, verbose=ctx.verbose, quiet=ctx.quiet)
    compared = compare_node(config, args.tables, count_only=args.count_only, verbose=ctx.verbose)
    differ = 0
    for res in compared.results:
        src = _fmt(config, res.src_rows, res.src_checksum, args.count_only)
        dst = _fmt(config, res.dst_rows, res.dst_checksum, args.count_only)
        print(f"{res.dest_table}: srcdb: {src}")
        print(f"{res.dest_table}: dstdb: {dst}")
        if (res.src_rows, res.src_checksum) != (res.dst_rows, res.dst_checksum) or res.ranges:
            print(f"{res.dest_table}: Results do not match!")
            differ += 1
    for line in compared.missing:
        print(line)
    return 1 if differ or compared.missing else 0


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
    repaired = repair_node(
        config,
        args.tables,
        apply=args.apply,
        fix_dir=Path(args.dir),
        where=args.repair_where,
        verbose=ctx.verbose,
    )
    for table in repaired.keyless_matching:
        print(f"{table}: no key, matches the provider: nothing to fix")
    total = 0
    for res in repaired.results:
        n = res.inserts + res.updates + res.deletes
        total += n
        where = f" ({res.sql_path})" if res.sql_path and n else ""
        state = "applied" if res.applied and n else "to fix"
        print(
            f"{res.dest_table}: {res.inserts} inserts, {res.updates} updates, "
            f"{res.deletes} deletes {state}{where}"
        )
    for table in repaired.unrepaired:  # last, where the operator looks
        print(f"{table}: differs and has no key, rows cannot be matched one by one: resync it")
    return 1 if (total and not args.apply) or repaired.unrepaired else 0
