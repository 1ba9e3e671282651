"""``pgferry diff``: compare any two tables (and write or apply the fix) without a config file.

    pgferry diff SRC_CONNSTR SRC_TABLE DST_CONNSTR DST_TABLE [--where COND]
                 [--max-rows N] [--json] [--repair FILE] [--apply]
                 [--set spark_master=...] [--set spark.x=...] [--set spark_wait=SECONDS]

A connect string may be given as ``@FILE`` or ``env:NAME`` (:mod:`pgferry.cli.connstr_arg`),
so that no password stands in argv; the fix file is written mode 0600.

The report names every differing key, in key order, the same on every run: ``-`` only in
the source, ``+`` only in the destination, ``!`` on both with other values (as reladiff
marks them), the rows of the first ``--max-rows`` (10) below their keys, and a count
(:mod:`pgferry.sync.diff`, :mod:`pgferry.sync.keydiff`); ``--json`` prints the same as one
object.

Exit status: 0 when the tables match (or the fix was applied), 1 when they differ (or an
error stopped the run, with its one line on stderr), 2 for bad usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pgferry.cli.connstr_arg import read_connstr
from pgferry.cli.registry import Context, command
from pgferry.config import parse_set_options
from pgferry.errors import UsageError
from pgferry.log import setup_logging
from pgferry.sync import diff

if TYPE_CHECKING:
    from pgferry.sync.compare import TableComparison
    from pgferry.sync.keydiff import KeyReport
    from pgferry.sync.repair import RepairResult


@command("diff", "compare two tables, optionally write/apply the fix", needs_config=False)
def cmd_diff(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser(
        "SRC_CONNSTR SRC_TABLE DST_CONNSTR DST_TABLE [--where COND] [--max-rows N] [--json]"
        " [--repair FILE] [--apply]",
        description="Compare two tables with the same columns and primary key.",
    )
    parser.prog = "pgferry diff"
    parser.usage = "pgferry diff " + (parser.usage or "").split(" diff ", 1)[-1]
    parser.add_argument("src_connstr", help="a connect string, @FILE or env:NAME")
    parser.add_argument("src_table")
    parser.add_argument("dst_connstr", help="a connect string, @FILE or env:NAME")
    parser.add_argument("dst_table")
    parser.add_argument("--where", help="WHERE expression applied on both sides")
    parser.add_argument(
        "--max-rows", type=int, default=10, metavar="N", help="rows shown for the first N keys"
    )
    parser.add_argument("--json", action="store_true", help="the report as one JSON object")
    parser.add_argument("--repair", metavar="FILE", type=Path, help="write the fix SQL here")
    parser.add_argument("--apply", action="store_true", help="apply the fix (needs --repair)")
    # Global switches written after "diff" reach this parser: accept them here too.
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VAL")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    # @FILE and env:NAME keep a password out of argv (cli/connstr_arg.py).
    args.src_connstr = read_connstr(args.src_connstr, "pgferry diff: SRC_CONNSTR").text
    args.dst_connstr = read_connstr(args.dst_connstr, "pgferry diff: DST_CONNSTR").text
    overrides = {**ctx.overrides, **parse_set_options(args.set)}
    verbose = ctx.verbose + args.verbose
    if args.max_rows < 0:
        raise UsageError("pgferry diff: --max-rows must be 0 or more")
    if args.apply and args.repair is None:
        raise UsageError("pgferry diff: --apply needs --repair FILE")
    setup_logging(verbose=verbose, quiet=ctx.quiet or args.quiet)

    found = diff.find(
        args.src_connstr, args.src_table, args.dst_connstr, args.dst_table,
        where=args.where, max_rows=args.max_rows, overrides=overrides, verbose=verbose,
    )  # fmt: skip
    result, report = found.result, found.report
    if not args.json:
        print("\n".join(result.lines()[:3]))  # totals and ok / do not match; keys below
        for line in report.lines() if report else ():
            print(line)
    if result.matches or args.repair is None:
        if args.json:
            _print_json(result, report, None)
        return 0 if result.matches else 1

    fixed = diff.fix(found, args.src_connstr, args.dst_connstr, args.repair, apply=args.apply)
    if args.json:
        _print_json(result, report, fixed)
    else:
        print(fixed.line())
    return 0 if fixed.applied or (args.apply and not fixed.changes) else 1


def _print_json(
    result: TableComparison, report: KeyReport | None, fixed: RepairResult | None
) -> None:
    """The report as one object: totals, keys (``report``) and the fix (``fixed``)."""
    from pgferry.cli.output import print_json

    out: dict[str, object] = {
        "srcdb": {"rows": result.src_rows, "checksum": str(result.src_checksum)},
        "dstdb": {"rows": result.dst_rows, "checksum": str(result.dst_checksum)},
    }
    if report is None:
        out.update(dest_table=result.dest_table, matches=True, differences=[])
    else:
        out.update(report.as_json(), matches=False)
    if fixed is not None:
        out["repair"] = {
            "file": str(fixed.sql_path),
            "applied": fixed.applied,
            "inserts": fixed.inserts,
            "updates": fixed.updates,
            "deletes": fixed.deletes,
        }
    print_json(out)
