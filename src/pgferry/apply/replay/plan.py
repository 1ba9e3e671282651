"""The plan of one batch segment: what it holds, per table, and in what order to read it.

The segment's summary, read by :func:`pgferry.apply.replay.summary.summarize`, says which tables it
touches, whether a table saw only inserts, its last TRUNCATE and the sequences' values
(:class:`~pgferry.apply.replay.batch_sql.SummaryRow`).  :func:`plan_segment` turns those rows into
:class:`TableWork` items (one per table, or one per ev_id range of a large table, read in
parallel) with the columns both sides share and the types the provider decodes them as,
from what :class:`~pgferry.apply.replay.shapes.TableShapes` read of the provider.  Nothing here
reads or writes a database: the planner only decides.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pgferry.apply.replay import unkeyed
from pgferry.apply.replay.batch_sql import Segment, SummaryRow, events_query, table_query
from pgferry.registry.routes import Route

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableWork:
    route: Route
    columns: tuple[str, ...]
    rows: int  # row events before the collapse
    inserts_only: bool
    barrier: int | None
    # Some of the segment's events of the table were inserts: a key new in the batch then
    # arrives collapsed as an update or a delete, so missing rows cannot be told apart.
    some_inserts: bool = True
    some_deletes: bool = True  # some of them were deletes (else no 'D' op, unless filtered)
    span: Segment | None = None  # an ev_id range of the segment, when the table is split
    order: int = 0  # ranges of one table apply in this order
    # The table's ranges are staged apart and merged on the subscriber, each key's last
    # row kept, before its handler applies them once (one_connection.apply_parts).
    merge: bool = False
    ranges: int = 1  # how many ranges the table is split into
    binary: bool = False  # COPY in binary format (same built-in types on both sides)
    decode: tuple[str, ...] = ()  # the columns' types as the provider decodes them

    @property
    def table_name(self) -> str:
        return self.route.table_name

    @property
    def events(self) -> bool:
        """The table's handler takes its events uncollapsed (see pgferry.handlers)."""
        return self.route.handler.mode == "events"

    def query(self, batch_sql: str, segment: Segment) -> str:
        if self.events:
            return events_query(batch_sql, self.route, self.span or segment)
        if self.route.keyless:  # not collapsed per key: every row image counts
            return unkeyed.table_query(
                batch_sql,
                self.route,
                self.columns,
                self.decode,
                self.span or segment,
                barrier=self.barrier,
                inserts_only=self.inserts_only,
            )
        return table_query(
            batch_sql,
            self.route,
            self.columns,
            self.decode,
            self.span or segment,
            barrier=self.barrier,
        )


@dataclass(frozen=True)
class PlanInputs:
    """What planning a segment needs besides its summary: the tables' shapes as
    :class:`~pgferry.apply.replay.shapes.TableShapes` read them and the replay settings (gathered
    on the worker's thread, where the shapes are cached, by
    :func:`pgferry.apply.replay.shapes.plan_inputs`)."""

    src_cols: dict[str, frozenset[str] | None]
    provider_types: dict[str, bool]
    binary: bool
    range_events: int
    read_ahead_events: int  # smaller batches are read inline: no reads ahead
    second_events: int = 0  # larger batches are applied on two connections (two_connections)
    merge_ranges: bool = False  # tables with updates in ranges too, merged on the subscriber

    def plan(
        self,
        summary: list[SummaryRow],
        routes: dict[str, Route],
        sequences: Iterable[str],
        *,
        ranges: bool,
        whole_updates: bool = True,
        source_columns: dict[str, frozenset[str] | None] | None = None,
    ) -> SegmentPlan:
        """:func:`plan_segment` with these inputs; ``ranges``: large tables in ev_id
        ranges; ``source_columns`` replace the shapes' (columns a later script changes)."""
        return plan_segment(
            summary,
            routes,
            sequences,
            self.src_cols if source_columns is None else source_columns,
            range_events=self.range_events if ranges else None,
            whole_updates=whole_updates,
            merge_updates=self.merge_ranges,
            binary=self.binary,
            provider_types=self.provider_types,
        )


@dataclass
class SegmentPlan:
    tables: list[TableWork]
    # Tables whose TRUNCATE replays (skip_truncate ones and those of handlers that do not
    # truncate excluded; an events handler sees its TRUNCATEs among the events).
    truncate: list[Route]
    sequences: dict[str, int]


def apply_columns(route: Route, src: frozenset[str] | None) -> tuple[str, ...]:
    """Local columns that the source also has (a column only on one side keeps its own, and
    so does a column the capture leaves out)."""
    cols = tuple(c for c in route.columns if c not in route.ignored)
    if src is None:
        return cols
    exprs = route.handler.column_exprs()  # computed from other columns of the source
    return tuple(c for c in cols if c in src or c in route.pk or c in exprs)


def plan_segment(
    summary: list[SummaryRow],
    routes: dict[str, Route],
    sequences: Iterable[str],
    source_columns: dict[str, frozenset[str] | None],
    *,
    range_events: int | None = None,
    whole_updates: bool = True,
    merge_updates: bool = False,
    binary: bool = False,
    provider_types: Mapping[str, bool] | None = None,
) -> SegmentPlan:
    """What the segment holds, per table; with ``range_events`` a table with more row
    events is split into ev_id ranges of about that many, read in parallel and applied in
    ev_id order (each range collapses on its own; a later range overrides an earlier one).
    With ``whole_updates`` only tables that saw nothing but inserts are split (nothing
    of theirs collapses); a table with updates or deletes is read whole, each key once,
    unless ``merge_updates``: then its ranges are read in parallel too and merged on the
    subscriber before the apply, which still applies each key once (:attr:`TableWork.merge`).
    ``binary``: both servers are of one major version, so tables whose columns all have
    built-in types move in COPY's binary format (no text output and parsing).
    ``provider_types`` says which of the subscriber's own (not built-in) types the provider
    has too; a column of a type it lacks is decoded as text there and parsed by the type's
    input function on the subscriber, as the initial copy does."""
    seqs = set(sequences)
    plan = SegmentPlan([], [], {})
    for row in summary:
        name, count, barrier = row.name, row.row_events, row.barrier
        if name is None:
            continue  # the row of scripts and removals
        if row.seq_value is not None and name in seqs:
            plan.sequences[name] = row.seq_value
            continue
        route = routes.get(name)
        if route is None or not route.applies:
            continue
        events = route.handler.mode == "events"
        if events:  # every event, TRUNCATEs included, goes to the handler
            if count or barrier is not None:
                work = TableWork(route, (), count, False, None, binary=binary)
                # Ranges of row events would leave out TRUNCATEs outside them: one read.
                split = range_events if barrier is None else None
                plan.tables.extend(_split(work, row.first, row.last, split))
            continue
        if barrier is not None and not route.skip_truncate and route.handler.truncates:
            plan.truncate.append(route)
        elif barrier is not None and route.skip_truncate:  # also: merged (node/merge.py)
            log.warning("TRUNCATE of %s not replayed (skip_truncate)", name)
        if count:
            cols = apply_columns(route, source_columns.get(name))
            work = TableWork(
                route, cols, count, row.inserts_only, barrier,
                some_inserts=row.some_inserts,
                some_deletes=row.some_deletes,
                binary=binary and route.builtin_types,
                decode=_decode_types(route, cols, provider_types or {}),
            )  # fmt: skip
            # Ranges collapse each on its own: a key updated in several of them is applied
            # once per range, and the subscriber's apply, not the provider's read, is
            # what a catch-up waits for.  So with ``whole_updates`` only a table that saw
            # nothing but inserts is split.
            split = range_events if work.inserts_only or not whole_updates else None
            if split is None and merge_updates and not route.keyless:
                split, work = range_events, replace(work, merge=True)
            plan.tables.extend(_split(work, row.first, row.last, split))
    plan.tables.sort(key=_read_order)
    plan.truncate.sort(key=lambda r: r.table_name)
    return plan


def _read_order(work: TableWork) -> tuple[Any, ...]:
    # The ranges of tables merged on the subscriber first, largest table first: such a
    # table is applied once all its ranges are in, and its apply is the longest (updates),
    # so it starts while the others are read.  Then first ranges first, larger tables
    # before smaller ones: what is read first is applied first, while the rest is read.
    if work.merge:
        return (0, -work.rows * work.ranges, work.route.table_name, work.order)
    return (1, work.order, -work.rows, work.route.table_name)


def _decode_types(
    route: Route, cols: tuple[str, ...], provider_types: Mapping[str, bool]
) -> tuple[str, ...]:
    """The destination's types of ``cols``; text for those the provider does not have."""
    by_name = dict(zip(route.columns, route.types, strict=True))
    return tuple(by_name[c] if provider_types.get(by_name[c], True) else "text" for c in cols)


def _split(
    work: TableWork, first: int | None, last: int | None, range_events: int | None
) -> list[TableWork]:
    if (
        not range_events
        or work.rows <= range_events
        or first is None
        or last is None
        or last <= first
    ):
        return [replace(work, merge=False)]  # one part: nothing to merge
    n = min(-(-work.rows // range_events), last - first + 1)
    bounds = [first - 1 + (last - first + 1) * i // n for i in range(n + 1)]
    return [
        replace(work, rows=work.rows // n, span=Segment(lo, hi), order=i, ranges=n)
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
