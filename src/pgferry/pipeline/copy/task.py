"""The copy's Spark task: copy heap block ranges of source tables into the destination.

Runs on executors, in Spark's Python workers.  A task receives a :class:`CopyJob` (both
connection strings, the exported snapshot id, the copy id and one :class:`TablePlan` per
table) and its list of :class:`BlockRange`; the driver builds them (:mod:`.plan`) and Spark
pickles them to the workers, so they hold plain values only (strings, ints, tuples) and must
stay picklable.  The functions are pickled by reference: the workers import this module.

A task imports the snapshot on the source and copies its ranges one after another: it streams
``COPY (select ...) TO STDOUT`` straight into ``COPY ... FROM STDIN`` on the destination
(bytes are passed through, never parsed; read off libpq by
:func:`pgferry.copyio.copy_out`, a megabyte at a time), and in the SAME destination
transaction records the
range in ``ferry_copy.range_done``.  That record is inserted first, so a retried or duplicated
task either waits for the first one and then skips the range, or redoes a range whose first
attempt rolled back: rows are never duplicated nor lost.  Rows are loaded with
``session_replication_role = replica`` (no triggers, no FK checks: tables of one copy load in
any order).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgferry import copyio, expressions
from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError
from pgferry.pipeline.snapshot import open_in_snapshot
from pgferry.pipeline.tables import relation


@dataclass(frozen=True)
class TablePlan:
    """What an executor needs to copy ranges of one table (plain, picklable values)."""

    dest_key: str  # the task's dest_table as given: the key of CopyResult.rows
    src_schema: str
    src_name: str
    dst_schema: str
    dst_name: str
    columns: tuple[str, ...]
    condition: str | None
    tid_ranges: bool  # False for partitioned sources (no heap of their own)
    binary: bool = False  # COPY in binary format: same built-in types on both sides
    exprs: tuple[tuple[str, str], ...] = ()  # (column, expression on the source) instead
    # (name, value) set locally on the source before the SELECT, for the expressions to read
    # (current_setting): parameters, never in the statement text; may be secret.
    settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class BlockRange:
    """One range of heap blocks of one table: the unit that is copied and recorded."""

    plan_no: int
    range_no: int
    lo_block: int | None
    hi_block: int | None  # None: open-ended, so rows in blocks added since sizing still count
    blocks: int = 0  # heap blocks in the range when sized: what balances the tasks


@dataclass(frozen=True)
class CopyJob:
    """Everything a task needs besides its ranges."""

    src_connstr: str
    dst_connstr: str
    snapshot_id: str
    copy_id: str
    plans: tuple[TablePlan, ...]


@contextlib.contextmanager
def connections(job: CopyJob) -> Iterator[tuple[psycopg.Connection, psycopg.Connection]]:
    """The source connection (its transaction in the snapshot) and the destination one."""
    src = open_in_snapshot(job.src_connstr, job.snapshot_id)
    try:
        dst = connect(job.dst_connstr)
        try:
            yield src, dst
        finally:
            dst.close()
    finally:
        src.close()


def copy_group(job: CopyJob, ranges: list[BlockRange]) -> int:
    """Copy ranges one after another; returns their row count.  The Spark task's body.

    One source connection and one destination connection (a transaction per range) serve all
    of them.
    """
    with connections(job) as (src, dst):
        return sum(copy_block_range(job, rng, src, dst) for rng in ranges)


def copy_block_range(
    job: CopyJob, rng: BlockRange, src: psycopg.Connection, dst: psycopg.Connection
) -> int:
    """Copy one range in one destination transaction; 0 when it was already copied."""
    plan = job.plans[rng.plan_no]
    try:
        return _copy(job, plan, rng, src, dst)
    except psycopg.Error as exc:
        # A source gone silent (db.NETWORK_DEFAULTS broke the connection) is named.
        lost = f"source {describe(job.src_connstr)}: " if src.broken else ""
        raise DatabaseError(
            f"copy {plan.dest_key} range {rng.range_no}: {lost}{error_text(exc)}"
        ) from None


def _copy(
    job: CopyJob,
    plan: TablePlan,
    rng: BlockRange,
    src: psycopg.Connection,
    dst: psycopg.Connection,
    key_where: sql.Composable | None = None,
) -> int:
    """Copy one range (``key_where``: a chunked copy's key range instead of blocks)."""
    cols = sql.SQL(", ").join(map(sql.Identifier, plan.columns))
    exprs = dict(plan.exprs)
    values = sql.SQL(", ").join(
        expressions.as_sql(exprs[c], f"expression of {c}") if c in exprs else sql.Identifier(c)
        for c in plan.columns
    )
    where: list[sql.Composable] = []
    if plan.tid_ranges and rng.lo_block is not None:
        where.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({rng.lo_block},0)")))
    if plan.tid_ranges and rng.hi_block is not None:
        where.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({rng.hi_block},0)")))
    if key_where is not None:
        where.append(key_where)
    if plan.condition:
        where.append(expressions.as_sql(plan.condition))
    select = sql.SQL("select {} from {}").format(
        values, relation(plan.src_schema, plan.src_name, not plan.tid_ranges)
    )
    if where:
        select = sql.SQL("{} where {}").format(select, sql.SQL(" and ").join(where))
    # Binary: about a fifth less work for both servers than text (no parsing of numbers,
    # times, addresses) where both sides hold the same built-in types.
    fmt = sql.SQL(" (format binary)" if plan.binary else "")
    copy_out_sql = sql.SQL("copy ({}) to stdout{}").format(select, fmt)
    copy_in = sql.SQL("copy {} ({}) from stdin{}").format(
        sql.Identifier(plan.dst_schema, plan.dst_name), cols, fmt
    )
    with dst.transaction():
        dst.execute("set local session_replication_role = replica")
        # Claim the range first: a concurrent duplicate blocks here until we finish, then
        # sees our row and skips; if we roll back, it copies the range itself.
        claimed = dst.execute(
            "insert into ferry_copy.range_done (copy_id, dest_table, range_no)"
            " values (%s, %s, %s) on conflict do nothing returning 1",
            (job.copy_id, plan.dest_key, rng.range_no),
        ).fetchone()
        if claimed is None:
            return 0
        for name, value in plan.settings:  # local to the source's snapshot transaction
            src.execute("select set_config(%s, %s, true)", (name, value))
        with dst.cursor() as dcur:
            # closing(): the reader thread is finished before the COPY ends, even on error.
            read = copyio.gather_in_thread(copyio.copy_out(src, copy_out_sql))
            with dcur.copy(copy_in) as inp, contextlib.closing(read) as chunks:
                for chunk in chunks:
                    inp.write(chunk)
            rows = dcur.rowcount
        dst.execute(
            "update ferry_copy.range_done set rows = %s, done_at = now()"
            " where copy_id = %s and dest_table = %s and range_no = %s",
            (rows, job.copy_id, plan.dest_key, rng.range_no),
        )
    return rows
