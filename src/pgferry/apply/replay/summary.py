"""What a batch holds, read on the provider before anything of it is applied: the first
stage of a batch's replay (:mod:`.batch`).

:func:`read_summary` gives a :class:`BatchSummary` as a pipeline: the queries are
composed first (a small batch's likely tables' reads, then the summary's,
:func:`pgferry.apply.replay.batch_sql.segment_summary`), run in one read-only message and
folded into summary rows (one row per table or sequence, and one row that counts the
queued scripts and the removals); then, only when some were counted, the scripts and
removals themselves, in ev_id order, in one query (:func:`pgferry.queue.batches.rare_events`).
What was read ahead while the batch before it was applied (:mod:`.prefetch`) serves
instead of the summary when it is this very batch.  :func:`summarize` reads one
segment's summary alone.  Nothing here writes: the strategy (:mod:`.strategy`) and the
segments (:mod:`.segments`) act on what it read.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import psycopg

from pgferry.apply.replay import shapes, small_batch
from pgferry.apply.replay.batch_sql import Segment, SummaryQuery, SummaryRow, segment_summary
from pgferry.apply.replay.plan import PlanInputs, TableWork
from pgferry.apply.replay.read import (
    PreparedBatch,
    RemovalEvent,
    ReplayError,
    ScriptEvent,
    provider_named,
    read_only_results,
)
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.db import error_text
from pgferry.events import EXECUTE_EVENT, REMOVAL_EVENTS
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import Batch, EventRange, RareEvent
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
    """The summary rows of the segment (see :func:`pgferry.apply.replay.batch_sql.summary_query`);
    ``scripts`` and ``removals`` add the row that counts them.  ``alone_events``: the
    segment's events, estimated, when nothing else of the worker runs beside the summary
    (it may then be read in parallel, :data:`PARALLEL_SUMMARY_EVENTS`).  ``prepared``:
    the batch's event query with its range as parameters, read instead of ``batch_sql``."""
    text = batch_sql if prepared is None else prepared.sql
    events = None if prepared is None else prepared.events
    query = segment_summary(
        text, routes.values(), sequences, segment, scripts=scripts, removals=removals
    )
    rows, _ = _read(provider, query, None, events, alone_events)
    return rows


def _read(
    provider: psycopg.Connection,
    query: SummaryQuery | None,
    reads: list[str] | None,
    events: EventRange | None,
    estimate: int | None,
) -> tuple[list[SummaryRow], small_batch.Arrays]:
    """The summary rows of ``query`` and, in the same message, the rows of ``reads`` (a
    small batch's likely tables, each :func:`small_batch.array_query`'s; None: the summary
    alone).  When some are read beside it, a read that fails takes the summary alone with
    it, and the summary is read again alone."""
    if query is None:
        return [], {}
    texts = [query.text, *(reads or [])]
    settings = summary_settings(estimate)
    try:
        # Read-only: copy conditions run here.  Few groups, many rows: hashing beats the
        # sort that the planner's row estimate for a batch (a handful) would choose, and
        # spills to disk.
        with provider_named(provider) if reads is not None else contextlib.nullcontext():
            results = read_only_results(provider, texts, settings=settings, events=events)
    except psycopg.Error as exc:
        if reads is None:
            raise ReplayError(f"reading the batch: {error_text(exc)}") from None
        if provider.broken:
            raise
        log.debug("reading a batch's summary with its tables: %s", exc)
        reads = []
        try:
            results = read_only_results(provider, texts[:1], settings=settings, events=events)
        except psycopg.Error as exc:
            raise ReplayError(f"reading the batch: {error_text(exc)}") from None
    arrays = {q: small_batch.counted(r) for q, r in zip(reads or [], results[1:], strict=True)}
    return query.rows(results[0]), arrays


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
    scripts and removals together (the node's own stream only: ``main``).  ``small``: the
    batch may be applied in two round trips (:func:`pgferry.apply.replay.strategy.may_be_small`),
    its likely tables are read with the summary (``recent``: the tables of the last small
    batch), in the same message: one round trip where the summary and the reads took two,
    and a table read for nothing costs a read of the batch's few events."""
    at = time.monotonic()
    prepared = None
    if batch.events is not None and estimate is not None and estimate <= settings.read_ahead_events:
        # Read inline: with the batch's range as parameters (see pgferry.apply.replay.read).
        prepared = PreparedBatch(queue_batches.generic_event_sql(provider), batch.events)
    works: list[TableWork] = []
    if ahead is None and small:
        inputs = shapes.plan_inputs(table_shapes, settings, provider, local, routes)
        works = _likely_tables(routes, seqs, inputs, estimate, recent)
    rows: list[SummaryRow] = ahead or []
    arrays: small_batch.Arrays = {}
    if ahead is None:
        # The event query the reads are composed on, and its parameters' values if any.
        text = batch_sql if prepared is None else prepared.sql
        events = None if prepared is None else prepared.events
        reads = None
        if small:  # the likely tables' reads, in the summary's message
            reads = [small_batch.array_query(work.query(text, Segment())) for work in works]
        # The small path counts scripts and removals on every stream, as the summary read
        # ahead does (pgferry.apply.replay.prefetch).
        counts = main or small
        query = segment_summary(
            text, routes.values(), seqs, Segment(), scripts=counts, removals=counts
        )
        # Nothing of this batch runs beside its summary: its reads wait for it.
        rows, arrays = _read(provider, query, reads, events, estimate)
    seconds = time.monotonic() - at
    rare: list[RareEvent] = []
    if main and any(row.scripts or row.removals for row in rows):
        rare = queue_batches.rare_events(provider, batch_sql, (EXECUTE_EVENT, *REMOVAL_EVENTS))
    scripts = [
        ScriptEvent(e.ev_id, e.ev_data or "", e.ev_extra1 or "", e.ev_extra2, e.ev_extra4)
        for e in rare
        if e.ev_type == EXECUTE_EVENT
    ]
    removals = [
        RemovalEvent(e.ev_id, e.ev_type, e.ev_extra1, e.ev_extra2)
        for e in rare
        if e.ev_type in REMOVAL_EVENTS
    ]
    return BatchSummary(rows, scripts, removals, seconds, arrays, prepared)


def _likely_tables(
    routes: dict[str, Route],
    seqs: list[str],
    inputs: PlanInputs,
    estimate: int | None,
    recent: frozenset[str] | None,
) -> list[TableWork]:
    """The tables a small batch's summary reads beside it, as
    :meth:`pgferry.apply.replay.small_batch.SmallBatch.read` would read them, whether the batch
    holds them or not: up to :data:`~pgferry.apply.replay.small_batch.GUESSED_TABLES` of those
    of ``recent`` (the tables of the last batch that had rows), else of every table.  No
    event: no read (an idle node's batches)."""
    active = [r for r in routes.values() if r.applies]
    if recent is not None:
        active = [r for r in active if r.table_name in recent]
    if not estimate or len(active) > small_batch.GUESSED_TABLES:
        return []
    # Each table as if it had updates: its columns and types.
    guess = [SummaryRow(r.table_name, row_events=1) for r in active]
    plan = inputs.plan(guess, routes, seqs, ranges=False)
    return [work for work in plan.tables if small_batch.plain(work)]


def count_scripts(summary: list[SummaryRow]) -> int:
    return sum(row.scripts for row in summary)


def count_removals(summary: list[SummaryRow]) -> int:
    """Removals of tables or sequences in the segment (counted with ``removals=True``)."""
    return sum(row.removals for row in summary)
