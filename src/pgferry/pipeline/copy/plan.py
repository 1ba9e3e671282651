"""Planning the copy on the driver: what to copy per table, in which ranges, in which tasks.

Each source table is split into heap block ranges (``ctid`` TID range scans work for any key
type); a partitioned source, having no heap of its own, is one range.  The ranges are shared
out among as many Spark tasks as can run at once, balanced by size.  Everything produced here
(:class:`~.task.TablePlan`, :class:`~.task.BlockRange`) is plain data that Spark pickles to the
executors.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from pgferry.errors import TableError
from pgferry.pipeline.copy.task import BlockRange, TablePlan
from pgferry.pipeline.tables import TableInfo, common_columns

log = logging.getLogger(__name__)

# A range of this many 8 kB blocks (32 MB) is big enough that per-task overhead is noise.
RANGE_BLOCKS = 4096
# Below this a table is not worth splitting for parallelism.
MIN_SPLIT_BLOCKS = 512
# Objects with a lower oid are built in: the same in every database of one major version.
FIRST_USER_OID = 16384


@dataclass(frozen=True)
class CopyTask:
    """One table to copy."""

    source_table: str  # 'schema.table' (as format('%I.%I') prints it)
    dest_table: str  # local name, may differ (other schema/table)
    copy_condition: str | None = None  # WHERE expression evaluated on the source table
    skip_truncate: bool = False
    # (destination column, SQL expression over the source's columns) computed on the
    # source instead of the column's own value (a table handler's column expressions).
    column_exprs: tuple[tuple[str, str], ...] = ()
    exclude_columns: tuple[str, ...] = ()  # not copied: the destination keeps its own
    # Custom settings set on the source before its SELECT, for the expressions (may hold a
    # secret: sent as parameters, never shown).
    settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    only_columns: tuple[str, ...] | None = None  # copy these destination columns only


def plan_tables(
    tasks: list[CopyTask],
    sources: list[TableInfo],
    dests: list[TableInfo],
    parallelism: int,
    binary: bool = False,
) -> tuple[list[TablePlan], list[BlockRange]]:
    """Per table what to copy; ``binary``: the servers may exchange binary COPY data."""
    plans: list[TablePlan] = []
    ranges: list[tuple[int, BlockRange]] = []
    for plan_no, (task, src, dst) in enumerate(zip(tasks, sources, dests, strict=True)):
        exprs = dict(task.column_exprs)
        columns = tuple(c for c in common_columns(src, dst) if c not in task.exclude_columns)
        columns += tuple(c for c in exprs if c in dst.column_names and c not in columns)
        if task.only_columns is not None:
            columns = tuple(c for c in columns if c in task.only_columns)
        if not columns:
            raise TableError(f"{src.display} and {dst.display} have no column in common")
        skipped = sorted(set(src.column_names) - set(columns))
        if skipped:
            log.info("copy %s: ignoring source columns %s", task.dest_table, ", ".join(skipped))
        tid = not src.partitioned
        plans.append(
            TablePlan(
                task.dest_table,
                src.schema,
                src.name,
                dst.schema,
                dst.name,
                columns,
                task.copy_condition,
                tid,
                binary and not exprs and binary_compatible(src, dst, columns),
                tuple((c, e) for c, e in task.column_exprs if c in columns),
                task.settings,
            )
        )
        for range_no, (lo, hi) in enumerate(block_ranges(src.pages if tid else 0, parallelism)):
            blocks = (src.pages if hi is None else hi) - (lo or 0)
            ranges.append((src.pages, BlockRange(plan_no, range_no, lo, hi, max(1, blocks))))
    # Biggest tables first: the last tasks to start are then the short ones.
    ranges.sort(key=lambda item: -item[0])
    return plans, [r for _, r in ranges]


def binary_compatible(src: TableInfo, dst: TableInfo, columns: tuple[str, ...]) -> bool:
    """Whether ``columns`` can travel in binary COPY format (servers of one major version).

    Binary COPY is stricter than text: each value must be read as exactly the type it was
    written as, and arrays and composites carry their element types' oids, which only
    built-in types share between databases.
    """
    for name in columns:
        a, b = src.column(name), dst.column(name)
        if a.type != b.type or a.type_oid != b.type_oid or not 0 < a.type_oid < FIRST_USER_OID:
            return False
    return True


def block_ranges(pages: int, parallelism: int = 1) -> list[tuple[int | None, int | None]]:
    """Split ``pages`` heap blocks into ranges; the first starts at 0, the last is open."""
    if pages <= MIN_SPLIT_BLOCKS:
        return [(None, None)]
    count = max(math.ceil(pages / RANGE_BLOCKS), min(parallelism, pages // MIN_SPLIT_BLOCKS))
    step = math.ceil(pages / count)
    bounds = list(range(0, pages, step))
    return [
        (None if i == 0 else lo, None if i == len(bounds) - 1 else bounds[i + 1])
        for i, lo in enumerate(bounds)
    ]


def estimates(tasks: list[CopyTask], sources: list[TableInfo]) -> dict[str, int | None]:
    """Rows expected per dest_table for the progress display; None when unknown."""
    return {
        t.dest_table: (s.est_rows if s.est_rows > 0 and not t.copy_condition else None)
        for t, s in zip(tasks, sources, strict=True)
    }


def task_groups(
    ranges: list[BlockRange], slots: int, max_parallel: int | None
) -> list[list[BlockRange]]:
    """The ranges as one Spark task per slot that may run at once, balanced by size.

    Spark runs at most ``slots`` tasks at a time (``max_parallel`` lowers that), and every
    task costs tens of milliseconds of scheduling and a new pair of connections, so one task
    per slot copies its ranges one after another.  The biggest range goes to the least
    loaded task first; each task keeps its ranges biggest first.
    """
    count = min(len(ranges), max(1, slots), max_parallel or len(ranges))
    groups: list[list[BlockRange]] = [[] for _ in range(max(1, count))]
    loads = [0] * len(groups)
    for rng in sorted(ranges, key=lambda r: -r.blocks):
        least = loads.index(min(loads))
        groups[least].append(rng)
        loads[least] += rng.blocks
    return [g for g in groups if g]
