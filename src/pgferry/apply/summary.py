"""What a batch holds, read on the provider before anything of it is applied: the first
stage of a batch's replay (:mod:`.batch`).

:func:`read_summary` gives a :class:`BatchSummary`: the batch's summary rows
(:func:`summarize`: one row per table or sequence, the queries are
:mod:`pgferry.apply.batch_sql`'s, and one row that counts the queued scripts and the
removals), then those scripts and removals themselves in ev_id order.  A small batch's
summary comes with the rows of its likely tables, read in the same message
(:func:`summarize_with_reads`); what was read ahead while the batch before it was applied
(:mod:`.prefetch`) serves instead when it is this very batch.  Nothing here writes: the
strategy (:mod:`.strategy`) and the segments (:mod:`.segments`) act on what it read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import psycopg

from pgferry.apply import shapes, small_batch
from pgferry.apply.batch_sql import (
    Segment,
    SummaryRow,
    fold_summary,
    grouped_summary_query,
    summary_query,
    summary_rows,
)
from pgferry.apply.plan import PlanInputs, TableWork
from pgferry.apply.read import (
    PreparedBatch,
    RemovalEvent,
    ReplayError,
    ScriptEvent,
    provider_named,
    read_only_results,
    read_only_rows,
)
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.db import error_text
from pgferry.events import REMOVAL_EVENTS
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import Batch
from pgferry.registry.routes import Route

log = logging.getLogger(__name__)

# A summary's estimate can pass jit_above_cost while the batch holds a few events: JIT's
# compilation (tens of milliseconds) would cost more than the query.
NO_JIT = "set local jit = off"

# A backlog's first summary runs while nothing else does (the batch's reads wait for it):
# parallel workers may take its scan and grouping when the batch holds at least this many
# events.  The planner cannot see that on its own: the event tables have no statistics, so
# it takes a batch for a handful of rows.  Later summaries are not parallel: they run while
# a batch is applied, beside it on the same cores.
PARALLEL_SUMMARY_EVENTS = 50000
PARALLEL_SUMMARY = (
    "set local parallel_setup_cost = 0",
    "set local parallel_tuple_cost = 0",
    "set local min_parallel_table_scan_size = 0",
)


def summary_settings(alone_events: int | None = None) -> tuple[str, ...]:
    """The SET LOCAL statements a summary runs after (see :func:`summarize`)."""
    settings: tuple[str, ...] = ("set local enable_sort = off", NO_JIT)
    if alone_events is not None and alone_events >= PARALLEL_SUMMARY_EVENTS:
        settings += PARALLEL_SUMMARY
    return settings


def summarize(
    provider: psycopg.Connection,
    batch_sql: str,
    routes: dict[str, Route],
    sequences: Iterable[str],
    segment: Segment,
    *,
    scripts: bool = False,
    removals: bool = False,
    alone_events: int | None = None,
    prepared: PreparedBatch | None = None,
) -> list[SummaryRow]:
    """The summary rows of the segment (see :func:`pgferry.apply.batch_sql.summary_query`);
    ``scripts`` and ``removals`` add the row that counts them.  ``alone_events``: the
    segment's events, estimated, when nothing else of the worker runs beside the summary
    (it may then be read in parallel, :data:`PARALLEL_SUMMARY_EVENTS`).  ``prepared``:
    the batch's event query with its range as parameters, read instead of ``batch_sql``."""
    active = [r for r in routes.values() if r.applies]
    seqs = list(sequences)
    if not active and not seqs and not scripts and not removals:
        return []
    # Grouped on the provider's plain columns and folded here, unless a copy hand-over
    # filters some table's events by transaction (only the per-table query can).
    grouped = not any(r.copy_snapshot for r in active)
    events = None
    if prepared is not None:
        batch_sql, events = prepared.sql, prepared.events
    if grouped:
        query = grouped_summary_query(batch_sql, seqs, segment)
    else:
        query = summary_query(batch_sql, active, seqs, segment, scripts=scripts, removals=removals)
    try:
        # Read-only: copy conditions run here.  Few groups, many rows: hashing beats the
        # sort that the planner's row estimate for a batch (a handful) would choose, and
        # spills to disk.
        rows = read_only_rows(
            provider, query, settings=summary_settings(alone_events), events=events
        )
    except psycopg.Error as exc:
        raise ReplayError(f"reading the batch: {error_text(exc)}") from None
    if grouped:
        return fold_summary(rows, active, seqs, scripts=scripts, removals=removals)
    return summary_rows(rows)


def summarize_with_reads(
    provider: psycopg.Connection,
    batch_sql: str,
    routes: dict[str, Route],
    seqs: list[str],
    inputs: PlanInputs,
    estimate: int | None,
    recent: frozenset[str] | None = None,
    prepared: PreparedBatch | None = None,
) -> tuple[list[SummaryRow], small_batch.Arrays]:
    """The batch's summary (scripts and removals counted) and, in the same message, the rows
    of up to :data:`~pgferry.apply.small_batch.GUESSED_TABLES` tables as
    :func:`~pgferry.apply.small_batch.apply_or_none` would read them, whether the batch
    holds them or not: those of ``recent`` (the tables of the last batch that had rows),
    else every table.  One round trip where the summary and the reads took two, and a table
    read for nothing costs a read of the batch's few events.  A read that fails takes the
    summary alone with it.  ``prepared``: read with the batch's range as parameters (the
    arrays' keys are then its texts)."""
    active = [r for r in routes.values() if r.applies]
    if recent is not None:
        active = [r for r in active if r.table_name in recent]
    works: list[TableWork] = []
    # No event: no read (an idle node's batches).  Else each table as if it had updates:
    # its columns and types.
    if estimate and len(active) <= small_batch.GUESSED_TABLES:
        guess = [SummaryRow(r.table_name, row_events=1) for r in active]
        plan = inputs.plan(guess, routes, seqs, ranges=False)
        works = [work for work in plan.tables if small_batch.plain(work)]
    text, events = small_batch.read_form(batch_sql, prepared)
    queries = [small_batch.array_query(work.query(text, Segment())) for work in works]
    grouped = grouped_summary_query(text, seqs, Segment())
    try:
        with provider_named(provider):
            results = read_only_results(
                provider,
                [grouped, *queries],
                settings=summary_settings(estimate),
                events=events,
            )
    except psycopg.Error as exc:
        if provider.broken:
            raise
        log.debug("reading a batch's summary with its tables: %s", exc)
        summary = summarize(
            provider,
            batch_sql,
            routes,
            seqs,
            Segment(),
            scripts=True,
            removals=True,
            alone_events=estimate,
        )
        return summary, {}
    summary = fold_summary(results[0], routes.values(), seqs, scripts=True, removals=True)
    return summary, {
        q: small_batch.counted(rows) for q, rows in zip(queries, results[1:], strict=True)
    }


def read_scripts(provider: psycopg.Connection, batch_sql: str) -> list[ScriptEvent]:
    """The batch's queued scripts in ev_id order."""
    return [ScriptEvent(*row) for row in queue_batches.scripts(provider, batch_sql)]


def read_removals(provider: psycopg.Connection, batch_sql: str) -> list[RemovalEvent]:
    """The batch's removals of tables and sequences in ev_id order."""
    rows = queue_batches.events_of_types(provider, batch_sql, REMOVAL_EVENTS)
    return [RemovalEvent(*row) for row in rows]


@dataclass
class BatchSummary:
    """What :func:`read_summary` read of one batch."""

    rows: list[SummaryRow]
    scripts: list[ScriptEvent]
    removals: list[RemovalEvent]
    seconds: float  # the summary's read
    # A small batch's tables as read with the summary.
    arrays: small_batch.Arrays = field(default_factory=dict)
    # The batch's reads with its range as parameters, when it is read inline.
    prepared: PreparedBatch | None = None


def read_summary(
    provider: psycopg.Connection,
    local: psycopg.Connection,
    batch: Batch,
    batch_sql: str,
    routes: dict[str, Route],
    seqs: list[str],
    *,
    main: bool,
    small: bool,
    estimate: int | None,
    ahead: list[SummaryRow] | None,
    settings: ReplaySettings,
    table_shapes: shapes.TableShapes,
    recent: frozenset[str] | None,
) -> BatchSummary:
    """One read of the batch's summary (``ahead``: the summary read ahead), then its
    scripts and removals (the node's own stream only: ``main``).  ``small``: the batch may
    be applied in two round trips (:func:`pgferry.apply.strategy.may_be_small`), its
    likely tables are read with the summary (``recent``: the tables of the last small
    batch)."""
    at = time.monotonic()
    prepared = None
    if batch.events is not None and estimate is not None and estimate <= settings.read_ahead_events:
        # Read inline: with the batch's range as parameters (see pgferry.apply.read).
        prepared = PreparedBatch(queue_batches.generic_event_sql(provider), batch.events)
    arrays: small_batch.Arrays = {}
    if ahead is not None:
        rows = ahead
    elif small:  # the tables' reads in the summary's message
        inputs = shapes.plan_inputs(table_shapes, settings, provider, local, routes)
        rows, arrays = summarize_with_reads(
            provider, batch_sql, routes, seqs, inputs, estimate, recent, prepared
        )
    else:
        # Nothing of this batch runs beside its summary: its reads wait for it.
        rows = summarize(
            provider,
            batch_sql,
            routes,
            seqs,
            Segment(),
            scripts=main,
            removals=main,
            alone_events=estimate,
            prepared=prepared,
        )
    seconds = time.monotonic() - at
    scripts = read_scripts(provider, batch_sql) if main and count_scripts(rows) else []
    removals = read_removals(provider, batch_sql) if main and count_removals(rows) else []
    return BatchSummary(rows, scripts, removals, seconds, arrays, prepared)


def count_scripts(summary: list[SummaryRow]) -> int:
    return sum(row.scripts for row in summary)


def count_removals(summary: list[SummaryRow]) -> int:
    """Removals of tables or sequences in the segment (counted with ``removals=True``)."""
    return sum(row.removals for row in summary)
