"""Sync points: how compare and repair read both sides at one logical point.

A sync point yields a pair of exported snapshot ids (source, destination) and keeps them
importable for the duration of the block.  Two kinds exist:

* :class:`IndependentSnapshots` — each side exports its own snapshot now.  Right for two
  databases that are not being written (``pgferry diff`` on quiet tables, benchmarks, tests).
* A replica's sync point, provided by the replication worker: the source snapshot is taken at
  a tick (in the transaction that inserts the tick, so no source write is blocked), the
  worker applies exactly up to that tick, exports the destination snapshot and waits until
  the job has imported it.  It must give up with a clear :class:`~pgferry.errors.PgferryError`
  when the subscriber lags more than ``lock_timeout`` seconds behind (the original's
  "Consumer lagging too much"), and never hold a lock longer than ``lock_timeout``.

Both kinds satisfy :class:`SyncPoint`; :func:`compare_at` and :func:`repair_at` run the jobs
on one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

from pgferry.pipeline.compare import CompareTask, TableComparison, compare_tables
from pgferry.pipeline.repair import RepairResult, repair_tables
from pgferry.pipeline.snapshot import exported_snapshot


class SyncPoint(Protocol):
    def hold(self, tables: Sequence[CompareTask]) -> AbstractContextManager[tuple[str, str]]:
        """Yield (source snapshot id, destination snapshot id) valid inside the block."""
        ...


class IndependentSnapshots:
    """Each side exports a snapshot of its own current state."""

    def __init__(self, src_connstr: str, dst_connstr: str) -> None:
        self.src_connstr = src_connstr
        self.dst_connstr = dst_connstr

    @contextmanager
    def hold(self, tables: Sequence[CompareTask]) -> Iterator[tuple[str, str]]:
        with (
            exported_snapshot(self.src_connstr) as src,
            exported_snapshot(self.dst_connstr) as dst,
        ):
            yield src.snapshot_id, dst.snapshot_id


def compare_at(
    spark, sync: SyncPoint, src_connstr: str, dst_connstr: str, tasks: list[CompareTask]
) -> list[TableComparison]:
    with sync.hold(tasks) as (src_snap, dst_snap):
        return compare_tables(
            spark, src_connstr, dst_connstr, tasks, src_snapshot=src_snap, dst_snapshot=dst_snap
        )


def repair_at(
    spark,
    sync: SyncPoint,
    src_connstr: str,
    dst_connstr: str,
    tasks: list[CompareTask],
    *,
    fix_dir: Path,
    apply: bool,
    comparisons: Sequence[TableComparison] | None = None,
) -> list[RepairResult]:
    """Repair at one sync point; with ``comparisons`` only their differing ranges are read."""
    ranges = None
    if comparisons is not None:
        ranges = {c.dest_table: c.ranges for c in comparisons}
    with sync.hold(tasks) as (src_snap, dst_snap):
        return repair_tables(
            spark, src_connstr, dst_connstr, tasks, fix_dir=fix_dir, apply=apply,
            src_snapshot=src_snap, dst_snapshot=dst_snap, ranges=ranges,
        )  # fmt: skip
