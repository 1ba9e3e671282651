"""Applying a planned segment on the worker's connection to the subscriber, inside the
caller's transaction: a segment's way (:class:`SegmentWay`, its ``read`` and ``apply``) of
one connection (:class:`OneConnection`), and the apply that another connection shares
(:func:`apply_segment_beside`, :class:`Beside`: :mod:`.two_connections`).

Each table part's COPY data is loaded unchanged into a temporary stage table with the
destination's column types, or for a handler that takes events the event columns
(:class:`~pgferry.apply.replay.stage_tables.StageTables`), then handed to the table's handler
(:mod:`pgferry.handlers`), which applies it set-based: the default one with one
``DELETE ... USING`` for the deleted keys and one ``INSERT`` (``ON CONFLICT DO UPDATE``, or
a plain insert when the table saw only inserts).  The ranges of a table merged here
(:attr:`TableWork.merge`) wait in stages of their own until the last arrives, then are
merged into the table's stage and applied once.  TRUNCATE barriers come first, sequences
last; nothing here commits (the caller adds the tick record to the same transaction).

Those statements also repair, silently, a subscriber that drifted: an update of a row
missing here inserts it, a delete of one finds nothing.  Both are counted per table
(:class:`ApplyStats`) and added to the node's totals at the batch's end
(:func:`pgferry.apply.replay.batch_end.record_divergence`), so that
drift shows in ``status`` and the log instead of being hidden by the next change.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar

import psycopg
from psycopg import sql

from pgferry.apply.replay.batch_sql import Segment
from pgferry.apply.replay.part_reads import PartReads
from pgferry.apply.replay.plan import SegmentPlan, TableWork
from pgferry.apply.replay.read import ReplayError
from pgferry.apply.replay.stage_tables import StageTables, load_stage, merge_ranges
from pgferry.db import error_text
from pgferry.errors import PgferryError
from pgferry.handlers import Applied, Staged
from pgferry.queue.batches import Batch
from pgferry.registry import entries
from pgferry.registry.routes import Route

log = logging.getLogger(__name__)


@dataclass
class ApplyStats:
    upserts: int = 0
    deletes: int = 0
    truncates: int = 0
    sequences: int = 0
    recreated: int = 0  # rows an update inserted: the key was missing here
    missing_deletes: int = 0  # deletes whose key was missing here
    # Per destination table with either: (rows re-created, deletes that found no row).
    diverged: dict[str, tuple[int, int]] = field(default_factory=dict)
    tables: set[str] = field(default_factory=set)
    spark: bool = False
    small: bool = False  # applied in two round trips (pgferry.apply.replay.small_batch)
    summary_seconds: float = 0.0  # the provider's summary of the batch
    apply_seconds: float = 0.0  # reading and applying, in the open transaction
    commit_seconds: float = 0.0

    def add(self, other: ApplyStats) -> None:
        self.upserts += other.upserts
        self.deletes += other.deletes
        self.truncates += other.truncates
        self.sequences += other.sequences
        self.recreated += other.recreated
        self.missing_deletes += other.missing_deletes
        for table, (rows, deletes) in other.diverged.items():
            had_rows, had_deletes = self.diverged.get(table, (0, 0))
            self.diverged[table] = (had_rows + rows, had_deletes + deletes)
        self.tables |= other.tables


def log_batch(batch: Batch, stats: ApplyStats, seconds: float, what: str) -> None:
    """The worker's debug line for a batch applied (``what``: whose, for a copied group)."""
    log.debug(
        "batch %s tick %s%s%s: %d upserts, %d deletes, %d truncates in %.3fs"
        " (summary %.3fs, apply %.3fs, commit %.3fs)",
        batch.batch_id,
        batch.tick_id,
        what,
        " (spark)" if stats.spark else " (two round trips)" if stats.small else "",
        stats.upserts,
        stats.deletes,
        stats.truncates,
        seconds,
        stats.summary_seconds,
        stats.apply_seconds,
        stats.commit_seconds,
    )


def apply_table(
    conn: psycopg.Connection,
    stages: StageTables,
    work: TableWork,
    parts: Iterable[Iterable[bytes]],
    tick_id: int = 0,
    tick_time: datetime | None = None,
    read_wait: float = 0.0,
) -> ApplyStats:
    """Load one table's rows (COPY data of one or more parts) into its stage and have its
    handler apply them (caller's transaction); ``tick_id``, ``tick_time``: the batch's
    tick; ``read_wait``: seconds the apply waited for the part's read (for the log)."""
    with _named_errors(work.route):
        stats = _apply_rows(conn, stages, work, parts, tick_id, tick_time, read_wait)
    return tagged_stats(work.route, stats)


@contextlib.contextmanager
def _named_errors(route: Route) -> Iterator[None]:
    """A table's apply failing: one ReplayError naming the table."""
    try:
        yield
    except psycopg.Error as exc:
        raise ReplayError(f"applying to {route.dest_text}: {error_text(exc)}") from None
    except PgferryError as exc:
        raise ReplayError(f"applying to {route.dest_text}: {exc}") from None


def tagged_stats(route: Route, stats: ApplyStats) -> ApplyStats:
    """``stats`` of one table's apply, with the table and what it found missing here."""
    stats.tables.add(route.table_name)
    if stats.recreated or stats.missing_deletes:
        stats.diverged[route.dest_text] = (stats.recreated, stats.missing_deletes)
    return stats


def _apply_rows(
    conn: psycopg.Connection,
    stages: StageTables,
    work: TableWork,
    parts: Iterable[Iterable[bytes]],
    tick_id: int,
    tick_time: datetime | None,
    read_wait: float,
) -> ApplyStats:
    route, cols = work.route, work.columns
    stage_at = time.monotonic()
    stage = stages.get(conn, route, cols, events=work.events)
    # One COPY per part: a binary COPY stream has a header and an end marker of its own.
    staged = sum(load_stage(conn, stage, part, work.binary) for part in parts)
    return _handle(conn, work, stage, staged, tick_id, tick_time, read_wait, stage_at)


def _handle(
    conn: psycopg.Connection,
    work: TableWork,
    stage: sql.Composable,
    staged: int,
    tick_id: int,
    tick_time: datetime | None,
    read_wait: float,
    stage_at: float,
    what: str = "",
) -> ApplyStats:
    """Have the table's handler apply the ``staged`` rows of ``stage``."""
    route = work.route
    handler_at = time.monotonic()
    stats = ApplyStats()
    if staged:
        # The one place where a table's staged rows are applied: its handler decides how
        # (the default, bulk, deletes by key and upserts: pgferry.handlers.upsert).
        done = route.handler.apply(staged_part(conn, work, stage, staged, tick_id, tick_time))
        stats = applied_stats(done)
    if log.isEnabledFor(logging.DEBUG):
        # Where a batch's time goes, per table part: waiting for the provider's read (its
        # decode and collapse), loading the stage (COPY, while the read streams) and the
        # handler's statements on the subscriber.
        log.debug(
            "  %s%s: %d rows (read wait %.3fs, stage %.3fs, apply %.3fs)",
            route.table_name,
            what or (f" part {work.order + 1}" if work.span is not None else ""),
            staged,
            read_wait,
            handler_at - stage_at,
            time.monotonic() - handler_at,
        )
    return stats


def staged_part(
    conn: psycopg.Connection,
    work: TableWork,
    stage: sql.Composable,
    rows: int,
    tick_id: int,
    tick_time: datetime | None,
) -> Staged:
    """What the handler of ``work``'s table is handed: ``rows`` rows staged in ``stage``."""
    route = work.route
    return Staged(
        conn,
        stage,
        rows,
        route.target(work.columns),
        "events" if work.events else "rows",
        tick_id,
        inserts_only=work.inserts_only,
        some_inserts=work.some_inserts,
        some_deletes=work.some_deletes,
        filtered=bool(route.image_condition),
        tick_time=tick_time,
    )


def applied_stats(done: Applied) -> ApplyStats:
    """A handler's counts (:class:`Applied`) as a table's :class:`ApplyStats`."""
    stats = ApplyStats(upserts=done.upserts, deletes=done.deletes)
    stats.recreated, stats.missing_deletes = done.recreated, done.missing_deletes
    return stats


def apply_truncates(conn: psycopg.Connection, routes: Sequence[Route], tick_id: int = 0) -> int:
    if routes:
        conn.execute(sql.SQL("truncate only {}").format(sql.SQL(", ").join(r.dest for r in routes)))
    for route in routes:  # a handler keeping rows elsewhere empties them too (the lake)
        route.handler.truncated(conn, route.target(route.columns), tick_id)
    return len(routes)


def apply_sequences(conn: psycopg.Connection, queue: str, values: dict[str, int]) -> int:
    """Sequences never move backwards on a subscriber.  Only ``queue``'s record of each
    moves: a database fed by several queues (a merge leaf) keeps one row per queue."""
    for seq_name, value in sorted(values.items()):
        entries.advance_seq(conn, queue, seq_name, value)
    return len(values)


def apply_parts(
    conn: psycopg.Connection,
    stages: StageTables,
    parts: Iterable[tuple[TableWork, Iterable[bytes]]],
    tick_id: int,
    tick_time: datetime | None,
) -> ApplyStats:
    """Apply each part as its read hands it over (:func:`apply_table`), timing the wait."""
    stats = ApplyStats()
    waiting_since = time.monotonic()
    merging: dict[str, _Merge] = {}
    for work, chunks in parts:
        read_wait = time.monotonic() - waiting_since
        if work.merge:
            merge = merging.setdefault(work.table_name, _Merge())
            applied = merge.add(conn, stages, work, chunks, tick_id, tick_time, read_wait)
            if applied is not None:
                stats.add(applied)
        else:
            stats.add(apply_table(conn, stages, work, [chunks], tick_id, tick_time, read_wait))
        waiting_since = time.monotonic()
    for name, merge in merging.items():
        if merge.pending:  # never commit a batch with a table's ranges staged, not applied
            raise ReplayError(f"applying {name}: {merge.pending} of its ranges never arrived")
    return stats


class _Merge:
    """The ranges of one table merged on the subscriber (:attr:`TableWork.merge`).

    Each range arrives collapsed on its own (its last row of each key); it is loaded into
    a stage of its own as it arrives.  Once the last is in, one statement keeps each key's
    row of the latest range, the row a whole-table read would have collapsed to, in the
    table's stage, and the handler applies that stage as it would the whole table's.
    """

    def __init__(self) -> None:
        self.stages: list[sql.Composable] = []
        self.pending = 0  # ranges still to come
        self.read_wait = 0.0
        self.loaded_s = 0.0

    def add(
        self,
        conn: psycopg.Connection,
        stages: StageTables,
        work: TableWork,
        chunks: Iterable[bytes],
        tick_id: int,
        tick_time: datetime | None,
        read_wait: float,
    ) -> ApplyStats | None:
        """Load one range (they arrive in their order); the table's stats after the last."""
        route = work.route
        at = time.monotonic()
        with _named_errors(route):
            stage = stages.get(conn, route, work.columns, part=work.order)
            load_stage(conn, stage, chunks, work.binary)
            self.stages.append(stage)
            self.read_wait += read_wait
            self.loaded_s += time.monotonic() - at
            self.pending = work.ranges - len(self.stages)
            if self.pending:
                return None
            at = time.monotonic()
            stage = stages.get(conn, route, work.columns)
            staged = conn.execute(merge_ranges(route, work.columns, stage, self.stages)).rowcount
            stats = _handle(
                conn, work, stage, staged, tick_id, tick_time, self.read_wait,
                at - self.loaded_s, f" ({work.ranges} ranges merged)",
            )  # fmt: skip
        return tagged_stats(route, stats)


Parts = Iterator[tuple[TableWork, Iterable[bytes]]]  # parts with their COPY data, as read
R = TypeVar("R")


class SegmentWay(Protocol[R]):
    """One way of replaying a segment's planned parts (what :mod:`.ways` makes of the
    batch's :class:`~pgferry.apply.replay.strategy.Strategy`): :meth:`read` gives the parts'
    reads, not yet started, and :meth:`apply` enters them and applies them in the open
    transaction.  :class:`OneConnection` on the worker's connection,
    :class:`~pgferry.apply.replay.two_connections.TwoConnections` shared with a second one."""

    def read(
        self, plan: SegmentPlan, batch_sql: str, segment: Segment
    ) -> AbstractContextManager[R]: ...

    def apply(
        self, conn: psycopg.Connection, plan: SegmentPlan, parts: AbstractContextManager[R]
    ) -> ApplyStats: ...


class OneConnection:
    """A segment's parts read one of three ways (``reads``: inline, reader threads or Spark
    tasks, :mod:`.part_reads`) and applied on the worker's connection."""

    def __init__(
        self,
        reads: PartReads,
        stages: StageTables,
        *,
        queue: str,
        tick_id: int,
        tick_time: datetime | None,
    ) -> None:
        self.reads, self.stages = reads, stages
        self.queue, self.tick_id, self.tick_time = queue, tick_id, tick_time

    def read(
        self, plan: SegmentPlan, batch_sql: str, segment: Segment
    ) -> AbstractContextManager[Parts]:
        return self.reads.parts(plan.tables, batch_sql, segment)

    def apply(
        self, conn: psycopg.Connection, plan: SegmentPlan, parts: AbstractContextManager[Parts]
    ) -> ApplyStats:
        return apply_segment(
            conn, self.stages, plan, parts,
            queue=self.queue, tick_id=self.tick_id, tick_time=self.tick_time,
        )  # fmt: skip


class Run(Protocol):
    """Parts being applied on another connection (:class:`Beside`)."""

    def outcome(self) -> ApplyStats:
        """Wait for them: what they did, or the error that failed them."""
        ...

    def abort(self) -> None:
        """Stop them: this connection's apply failed."""
        ...


class Beside(Protocol):
    """Another connection that applies some of a segment's parts meanwhile
    (:class:`~pgferry.apply.replay.two_connections.TwoConnections`)."""

    def start(self, parts: Parts) -> Run: ...


def apply_segment(
    conn: psycopg.Connection,
    stages: StageTables,
    plan: SegmentPlan,
    parts: AbstractContextManager[Parts],
    *,
    queue: str,
    tick_id: int = 0,
    tick_time: datetime | None = None,
) -> ApplyStats:
    """Apply ``plan`` of ``queue``'s batch inside the caller's transaction on ``conn``, each
    of its ``parts`` as its read hands it over (:meth:`.part_reads.PartReads.parts`:
    inline on the worker's own provider connection, or by threads or Spark tasks reading
    ahead of the apply; entered once the TRUNCATEs are done)."""
    stats = ApplyStats(truncates=apply_truncates(conn, plan.truncate, tick_id))
    try:
        with parts as read:
            stats.add(apply_parts(conn, stages, read, tick_id, tick_time))
    except psycopg.Error as exc:
        raise ReplayError(error_text(exc)) from None
    stats.sequences = apply_sequences(conn, queue, plan.sequences)  # sequences last
    return stats


def apply_segment_beside(
    conn: psycopg.Connection,
    stages: StageTables,
    plan: SegmentPlan,
    parts: AbstractContextManager[tuple[Parts, Parts]],
    beside: Beside,
    *,
    queue: str,
    tick_id: int,
    tick_time: datetime | None,
) -> ApplyStats:
    """:func:`apply_segment` with ``parts`` as two streams (this connection's, and those
    ``beside`` applies on its own connection meanwhile, started once the TRUNCATEs are done
    and the reads entered); returns when both are done (``beside``'s transaction has
    committed, the caller's is still open)."""
    stats = ApplyStats(truncates=apply_truncates(conn, plan.truncate, tick_id))
    run: Run | None = None
    try:
        with parts as (mine, theirs):
            run = beside.start(theirs)
            stats.add(apply_parts(conn, stages, mine, tick_id, tick_time))
            stats.add(run.outcome())
    except BaseException as exc:
        if run is not None:
            run.abort()
        if isinstance(exc, psycopg.Error):
            raise ReplayError(error_text(exc)) from None
        raise
    stats.sequences = apply_sequences(conn, queue, plan.sequences)  # sequences last
    return stats
