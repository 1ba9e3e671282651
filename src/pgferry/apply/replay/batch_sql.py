"""The queries that read a batch on the provider, already decided and typed.

Routing, the copy hand-over filter and the copy_condition are all evaluated by the
provider while it reads, so what comes back is small and ready to load:

* :func:`summary_query`: one row per table or sequence of the batch (segment): how many
  row events it has, whether all of them are inserts, the last TRUNCATE (a barrier: only
  later rows count) and, for a sequence, its highest value; for the node's own stream one
  more row counts the queued scripts and the removals of tables and sequences.
  :func:`grouped_summary_query` with :func:`fold_summary` gives the same rows faster
  when no table's copy hand-over filters events; :func:`segment_summary` chooses between
  the two and gives the query with the reading of its answer (:class:`SummaryQuery`).
* :func:`table_query`: one table's rows, collapsed to the last event per primary key
  (``DISTINCT ON`` over the typed key) and decoded on the provider with the subscriber's
  column types, as ``(op, col1, col2, ...)`` where op is ``I`` (insert), ``U`` (upsert)
  or ``D`` (delete by key).  ``COPY ... TO STDOUT`` of it loads unchanged into the
  subscriber's stage table with ``COPY ... FROM STDIN``.

A row image that fails its table's condition becomes ``D``: a row that left the condition
disappears on the subscriber.

``batch_sql`` is the batch's event query as the queue hands it out, without ordering
(:func:`pgferry.queue.batches.batch_event_sql`): these queries group and sort on their own.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from pgferry import expressions
from pgferry.events import (
    EVENT_COLUMNS,
    EXECUTE_EVENT,
    REMOVAL_EVENTS,
    SEQ_EVENT,
    TRUNCATE_EVENT,
)
from pgferry.registry.routes import Route, split_name

# The event types in the SQL text, as literals.
_TRUNCATE, _SEQ, _EXECUTE = (sql.Literal(t) for t in (TRUNCATE_EVENT, SEQ_EVENT, EXECUTE_EVENT))
_REMOVALS = sql.Literal(list(REMOVAL_EVENTS))


@dataclass(frozen=True)
class Segment:
    """The part of a batch between queued scripts: ``after < ev_id <= upto``."""

    after: int | None = None
    upto: int | None = None

    def filters(self) -> list[sql.Composable]:
        out: list[sql.Composable] = []
        if self.after is not None:
            out.append(sql.SQL("e.ev_id > {}").format(sql.Literal(self.after)))
        if self.upto is not None:
            out.append(sql.SQL("e.ev_id <= {}").format(sql.Literal(self.upto)))
        return out


def _handover_skip(route: Route) -> sql.Composable | None:
    """Events already contained in the table's copy are skipped: those whose transaction
    is visible in the copy's snapshot (kept until no such event can come any more)."""
    if route.copy_snapshot:
        return sql.SQL("not pg_visible_in_snapshot(e.ev_txid::text::xid8, {})").format(
            sql.Literal(route.copy_snapshot)
        )
    return None


def summary_query(
    batch_sql: str,
    routes: Iterable[Route],
    sequences: Iterable[str],
    segment: Segment,
    *,
    scripts: bool = False,
    removals: bool = False,
) -> str:
    """One row per table and sequence of the segment, each column named as the
    :class:`SummaryRow` field it fills (:func:`summary_rows` builds them); with
    ``scripts`` one more row, name NULL, counts the queued scripts (EXECUTE events), and
    with ``removals`` the same row counts the :data:`REMOVAL_EVENTS`."""
    routes = [r for r in routes if r.applies]
    seqs = list(sequences)
    row_or_truncate = sql.SQL("(e.ev_type = {} or substr(e.ev_type, 2, 1) = ':')").format(_TRUNCATE)
    # Tables without a hand-over filter share one array test; the others need their own.
    plain = [r.table_name for r in routes if _handover_skip(r) is None]
    terms: list[sql.Composable] = []
    if plain:
        terms.append(
            sql.SQL("(e.ev_extra1 = any({}) and {})").format(sql.Literal(plain), row_or_truncate)
        )
    for route in routes:
        skip = _handover_skip(route)
        if skip is not None:
            terms.append(
                sql.SQL("(e.ev_extra1 = {} and {} and {})").format(
                    sql.Literal(route.table_name), row_or_truncate, skip
                )
            )
    if seqs:
        terms.append(
            sql.SQL("(e.ev_type = {} and e.ev_extra1 = any({}))").format(_SEQ, sql.Literal(seqs))
        )
    if scripts:
        terms.append(sql.SQL("(e.ev_type = {})").format(_EXECUTE))
    if removals:
        terms.append(sql.SQL("(e.ev_type = any({}))").format(_REMOVALS))
    if not terms:
        terms.append(sql.SQL("false"))
    where = [sql.SQL("({})").format(sql.SQL(" or ").join(terms)), *segment.filters()]
    # The inner query computes each event's kind once ("offset 0" keeps the planner from
    # pasting those expressions into every aggregate).
    query = sql.SQL(
        """
        select {columns}
          from (select case when e.ev_type = {execute} or e.ev_type = any({removal})
                            then null else e.ev_extra1 end as name,
                       e.ev_id,
                       substr(e.ev_type, 2, 1) = ':' as rowev,
                       substr(e.ev_type, 1, 2) = 'I:' as ins,
                       substr(e.ev_type, 1, 2) = 'D:' as del,
                       case when e.ev_type = {truncate} then 'R'
                            when e.ev_type = {execute} then 'X'
                            when e.ev_type = any({removal}) then 'G' end as kind,
                       case when e.ev_type = {seq} then e.ev_data::bigint end as seqv
                  from ({batch}) e
                 where {where}
                offset 0) x
         group by name
        """
    ).format(
        columns=_SUMMARY_COLUMNS,
        batch=sql.SQL(batch_sql),
        where=sql.SQL(" and ").join(where),
        removal=_REMOVALS,
        truncate=_TRUNCATE,
        execute=_EXECUTE,
        seq=_SEQ,
    )
    return query.as_string(None)


def grouped_summary_query(batch_sql: str, sequences: Iterable[str], segment: Segment) -> str:
    """The segment's events counted per ``(ev_extra1, ev_type)``: ``(ev_extra1, ev_type,
    count, min ev_id, max ev_id, highest SEQ value)``, to be folded by
    :func:`fold_summary` into :func:`summary_query`'s rows.

    The same answer for about half the provider's time: grouping on the two plain columns
    computes nothing per event (a backlog has a handful of groups and hundreds of thousands
    of events).  It cannot skip events per table, so tables whose copy hand-over filters
    events need :func:`summary_query`.
    """
    where = segment.filters() or [sql.SQL("true")]
    query = sql.SQL(
        """
        select e.ev_extra1, e.ev_type, count(*), min(e.ev_id), max(e.ev_id),
               max(case when e.ev_type = {seq} and e.ev_extra1 = any({seqs})
                        then e.ev_data::bigint end)
          from ({batch}) e
         where {where}
         group by e.ev_extra1, e.ev_type
        """
    ).format(
        columns=_SUMMARY_COLUMNS,
        batch=sql.SQL(batch_sql),
        where=sql.SQL(" and ").join(where),
        seqs=sql.Literal(list(sequences)),
        seq=_SEQ,
    )
    return query.as_string(None)


@dataclass(frozen=True, slots=True)
class SummaryRow:
    """One row of a segment's summary (:func:`summary_query`, or :func:`fold_summary`):
    a table's row events, a sequence's value, or, with ``name`` None, the counts of queued
    scripts and removals.  ``first`` and ``last`` are the ev_ids of the table's row events;
    ``barrier`` its last TRUNCATE's."""

    name: str | None
    row_events: int = 0
    inserts_only: bool = False
    barrier: int | None = None
    seq_value: int | None = None
    first: int | None = None
    last: int | None = None
    scripts: int = 0
    removals: int = 0
    some_inserts: bool = False
    some_deletes: bool = False


# summary_query's aggregates, each named as the SummaryRow field it fills: the rows are
# built by name (summary_rows), whatever the order of the SELECT.
_SUMMARY_AGGREGATES = {
    "name": "name",
    "row_events": "count(*) filter (where rowev)",
    "inserts_only": "coalesce(bool_and(ins) filter (where rowev), false)",
    "barrier": "max(ev_id) filter (where kind = 'R')",
    "seq_value": "max(seqv)",
    "first": "min(ev_id) filter (where rowev)",
    "last": "max(ev_id) filter (where rowev)",
    "scripts": "count(*) filter (where kind = 'X')",
    "removals": "count(*) filter (where kind = 'G')",
    "some_inserts": "coalesce(bool_or(ins) filter (where rowev), false)",
    "some_deletes": "coalesce(bool_or(del) filter (where rowev), false)",
}
_SUMMARY_COLUMNS = sql.SQL(", ").join(
    sql.SQL("{} as {}").format(sql.SQL(expr), sql.Identifier(field))
    for field, expr in _SUMMARY_AGGREGATES.items()
)


def summary_rows(rows: Iterable[tuple[Any, ...]]) -> list[SummaryRow]:
    """:func:`summary_query`'s rows, each field taken by its column's name."""
    names = tuple(_SUMMARY_AGGREGATES)
    return [SummaryRow(**dict(zip(names, row, strict=True))) for row in rows]


@dataclass(slots=True)
class _Fold:
    """A table's or sequence's groups, added up (see :func:`fold_summary`)."""

    row_events: int = 0
    inserts_only: bool | None = None
    barrier: int | None = None
    seq_value: int | None = None
    first: int | None = None
    last: int | None = None
    some_inserts: bool = False
    some_deletes: bool = False

    def row(self, name: str) -> SummaryRow:
        return SummaryRow(
            name, row_events=self.row_events, inserts_only=bool(self.inserts_only),
            barrier=self.barrier, seq_value=self.seq_value, first=self.first, last=self.last,
            some_inserts=self.some_inserts, some_deletes=self.some_deletes,
        )  # fmt: skip


def fold_summary(
    groups: Iterable[tuple[Any, ...]],
    routes: Iterable[Route],
    sequences: Iterable[str],
    *,
    scripts: bool = False,
    removals: bool = False,
) -> list[SummaryRow]:
    """:func:`summary_query`'s rows from :func:`grouped_summary_query`'s groups."""
    tables = {r.table_name for r in routes if r.applies}
    seqs = set(sequences)
    acc: dict[str, _Fold] = {}
    scripts_n = removals_n = 0
    for name, ev_type, count, first, last, seq_value in groups:
        if ev_type == EXECUTE_EVENT:
            scripts_n += count if scripts else 0
            continue
        if ev_type in REMOVAL_EVENTS:
            removals_n += count if removals else 0
            continue
        if ev_type == SEQ_EVENT:
            if name not in seqs:
                continue
        elif name not in tables or ev_type is None:
            continue
        elif ev_type != TRUNCATE_EVENT and ev_type[1:2] != ":":
            continue  # neither a row event nor a TRUNCATE: other event types count not
        fold = acc.get(name)
        if fold is None:
            fold = acc[name] = _Fold()
        if ev_type == SEQ_EVENT:
            fold.seq_value = seq_value if fold.seq_value is None else max(fold.seq_value, seq_value)
        elif ev_type == TRUNCATE_EVENT:
            fold.barrier = last if fold.barrier is None else max(fold.barrier, last)
        else:  # a row event
            ins = ev_type[:2] == "I:"
            fold.row_events += count
            fold.inserts_only = ins if fold.inserts_only is None else fold.inserts_only and ins
            fold.some_inserts = fold.some_inserts or ins
            fold.some_deletes = fold.some_deletes or ev_type[:2] == "D:"
            fold.first = first if fold.first is None else min(fold.first, first)
            fold.last = last if fold.last is None else max(fold.last, last)
    out = [fold.row(name) for name, fold in acc.items()]
    if scripts_n or removals_n:
        out.append(SummaryRow(None, scripts=scripts_n, removals=removals_n))
    return out


@dataclass(frozen=True)
class SummaryQuery:
    """A segment's summary as one query and the way its answer is read: the grouped query
    folded here (:func:`grouped_summary_query`, :func:`fold_summary`), or, when some
    table's copy hand-over filters events by transaction, the per-table query
    (:func:`summary_query`, :func:`summary_rows`)."""

    text: str
    grouped: bool
    routes: tuple[Route, ...]  # the tables that apply
    sequences: tuple[str, ...]
    scripts: bool
    removals: bool

    def rows(self, result: Iterable[tuple[Any, ...]]) -> list[SummaryRow]:
        """The summary rows of this query's answer."""
        if self.grouped:
            return fold_summary(
                result, self.routes, self.sequences, scripts=self.scripts, removals=self.removals
            )
        return summary_rows(result)


def segment_summary(
    batch_sql: str,
    routes: Iterable[Route],
    sequences: Iterable[str],
    segment: Segment,
    *,
    scripts: bool = False,
    removals: bool = False,
) -> SummaryQuery | None:
    """The segment's summary query (None: nothing to summarize: no table, sequence,
    script or removal asked for)."""
    active = tuple(r for r in routes if r.applies)
    seqs = tuple(sequences)
    if not active and not seqs and not scripts and not removals:
        return None
    # Grouped on the provider's plain columns and folded here, unless a copy hand-over
    # filters some table's events by transaction (only the per-table query can).
    grouped = not any(r.copy_snapshot for r in active)
    if grouped:
        text = grouped_summary_query(batch_sql, seqs, segment)
    else:
        text = summary_query(batch_sql, active, seqs, segment, scripts=scripts, removals=removals)
    return SummaryQuery(text, grouped, active, seqs, scripts, removals)


def _on_source(route: Route, expr: str) -> sql.Composable:
    """``expr`` evaluated on the event's row image as the SOURCE table's row type (copy
    conditions and handlers' filters and column expressions are written in its terms)."""
    return expressions.on_row_image(expr, split_name(route.source_type or route.table_name))


def _cond_expr(route: Route) -> sql.Composable:
    cond = route.image_condition or "true"
    return sql.SQL("case when {} then 'U' else 'D' end").format(_on_source(route, cond))


def table_query(
    batch_sql: str,
    route: Route,
    columns: Sequence[str],
    types: Sequence[str],
    segment: Segment,
    *,
    barrier: int | None = None,
) -> str:
    """SQL text of one table's collapsed, typed rows ``(op, *columns)`` (see module doc).

    ``columns`` are destination columns (the key included), decoded with ``types`` (one per
    column: the destination's, or text where the provider lacks the type).
    """
    head, tail = _table_query_around(route, tuple(columns), tuple(types), segment, barrier)
    return head + batch_sql + tail


@functools.lru_cache(maxsize=512)
def _table_query_around(
    route: Route,
    columns: tuple[str, ...],
    types: tuple[str, ...],
    segment: Segment,
    barrier: int | None,
) -> tuple[str, str]:
    # The text before and after the batch's event query, composed once per table shape:
    # a small batch's tables are read every few milliseconds, and composing costs more
    # client CPU than the read itself.
    coldef = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t))
        for c, t in zip(columns, types, strict=True)
    )
    pk = sql.SQL(", ").join(sql.SQL("r.{}").format(sql.Identifier(c)) for c in route.pk)
    if route.image_condition:
        upsert: sql.Composable = _cond_expr(route)
    else:
        upsert = sql.SQL("case when e.ev_type like 'I:%' then 'I' else 'U' end")
    where = table_events(route, segment, "e.ev_type like '_:%'")
    if route.key_filter:
        where.append(_on_source(route, route.key_filter))
    if barrier is not None:
        where.append(sql.SQL("e.ev_id > {}").format(sql.Literal(barrier)))
    exprs = route.handler.column_exprs()
    values = [
        sql.SQL("{}::{}").format(_on_source(route, exprs[c]), sql.SQL(t))
        if c in exprs
        else sql.SQL("r.{}").format(sql.Identifier(c))
        for c, t in zip(columns, types, strict=True)
    ]
    head = sql.SQL(
        """
        select distinct on ({pk})
               (case when e.ev_type like 'D:%' then 'D' else {upsert} end)::"char", {cols}
          from ("""
    ).format(pk=pk, upsert=upsert, cols=sql.SQL(", ").join(values))
    tail = sql.SQL(
        """) e
          cross join lateral json_to_record(e.ev_data::json) as r({coldef})
         where {where}
         order by {pk}, e.ev_id desc
        """
    ).format(coldef=coldef, where=sql.SQL(" and ").join(where), pk=pk)
    return head.as_string(None), tail.as_string(None)


def table_events(
    route: Route, segment: Segment, kinds: str | sql.Composable
) -> list[sql.Composable]:
    """Conditions choosing the table's events of ``kinds`` (SQL) in the segment."""
    where = [
        sql.SQL("e.ev_extra1 = {}").format(sql.Literal(route.table_name)),
        sql.SQL(kinds) if isinstance(kinds, str) else kinds,
        *segment.filters(),
    ]
    skip = _handover_skip(route)
    if skip is not None:
        where.append(skip)
    return where


def events_query(batch_sql: str, route: Route, segment: Segment) -> str:
    """SQL text of one table's events, uncollapsed, in ev_id order, as the columns of
    :data:`pgferry.events.EVENT_COLUMNS` (row events and TRUNCATEs), for a handler that
    works on events.  A key filter of the handler skips row events failing it."""
    kinds = sql.SQL("(e.ev_type like '_:%' or e.ev_type = {})").format(_TRUNCATE)
    where = table_events(route, segment, kinds)
    if route.key_filter:
        where.append(
            sql.SQL("(e.ev_type = {} or {})").format(_TRUNCATE, _on_source(route, route.key_filter))
        )
    cols = sql.SQL(", ").join(
        sql.SQL("e.{}::text::{}").format(sql.Identifier(c), sql.SQL(t))
        if c == "ev_txid"
        else sql.SQL("e.{}::{}").format(sql.Identifier(c), sql.SQL(t))
        for c, t in EVENT_COLUMNS
    )
    query = sql.SQL("select {cols} from ({batch}) e where {where} order by e.ev_id").format(
        cols=cols, batch=sql.SQL(batch_sql), where=sql.SQL(" and ").join(where)
    )
    return query.as_string(None)
