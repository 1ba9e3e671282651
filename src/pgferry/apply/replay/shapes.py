"""What the provider has of the replayed tables, and so what a segment's plan reads them
with: the second stage of a batch segment's replay, between its summary and its plan.

:class:`TableShapes` keeps, between batches, the columns the provider has of each
replayed table and which of the subscriber's own column types it has too.
:func:`plan_inputs` gives a segment what its plan needs besides its summary
(:class:`~pgferry.apply.replay.plan.PlanInputs`): those shapes with the columns the segment's
queued rows carry where they differ (:meth:`TableShapes.carried`, and what a script later
in the batch takes away, :func:`columns_carried`), and the replay settings.
:func:`provider_routes` names a table that a later script renames by the name the
provider knows it by now.  The only statements sent here are the provider's catalog
reads of shapes not yet known and the read of one queued row's keys per doubtful table.
"""

from __future__ import annotations

from dataclasses import replace

import psycopg

from pgferry.apply.replay.batch_sql import SummaryRow
from pgferry.apply.replay.plan import PlanInputs, apply_columns
from pgferry.apply.replay.read import ReplayError, read_only_rows
from pgferry.apply.replay.script_shapes import LaterChanges
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.db import error_text
from pgferry.registry.routes import Route


class TableShapes:
    """What the provider has of the replayed tables (their columns) and of the subscriber's
    own column types, read once and kept until :meth:`forget` (the provider or a table's
    shape may have changed).

    The provider's catalog shows its tables as they are now, which is not always the shape
    of the rows still queued: a leaf behind may apply rows written before a RENAME COLUMN
    or DROP COLUMN whose script is in a later batch (a queued script after the rows of
    the same batch is :func:`columns_carried`' part).  Where a table's columns on the
    subscriber are not all on the provider, the columns its queued rows carry are read
    from one of them (:meth:`carried`) and replace the catalog's: every row queued
    between two scripts carries the same columns, and replay forgets them after each
    script."""

    def __init__(self) -> None:
        self._src_cols: dict[str, frozenset[str] | None] = {}
        self._prov_types: dict[str, bool] = {}  # the provider has this local type
        self._carried: dict[str, frozenset[str]] = {}  # registry name -> its rows' keys
        # registry name -> (its route, the provider's columns, short): see short_tables.
        self._short: dict[str, tuple[Route, frozenset[str] | None, bool]] = {}

    def forget(self) -> None:
        self._src_cols, self._prov_types, self._carried, self._short = {}, {}, {}, {}

    def short_tables(
        self, active: list[Route], src_cols: dict[str, frozenset[str] | None]
    ) -> frozenset[str]:
        """The tables of ``active`` with columns here that the provider's ``src_cols``
        lack (the plan's rule, :func:`~pgferry.apply.replay.plan.apply_columns`): a column of the
        subscriber's own, one a later script renamed or dropped on the provider while its
        rows wait here, or the whole table renamed there (no columns).  Decided again only
        for a table whose route or columns changed."""
        out = []
        for route in active:
            src = src_cols.get(route.table_name)
            known = self._short.get(route.table_name)
            if known is None or known[0] is not route or known[1] is not src:
                short = src is None or apply_columns(route, src) != apply_columns(route, None)
                known = self._short[route.table_name] = (route, src, short)
            if known[2]:
                out.append(route.table_name)
        return frozenset(out)

    def carried(
        self, provider: psycopg.Connection, batch_sql: str, rows: dict[str, int]
    ) -> dict[str, frozenset[str]]:
        """Per table of ``rows`` (registry name -> the ev_id of one of its row events in
        ``batch_sql``), the columns its queued rows carry, read once until :meth:`forget`."""
        wanted = {ev_id: t for t, ev_id in rows.items() if t not in self._carried}
        if wanted:
            self._carried.update(_row_keys(provider, batch_sql, wanted))
        return {t: self._carried[t] for t in rows if t in self._carried}

    def source_columns(
        self, provider: psycopg.Connection, active: list[Route]
    ) -> dict[str, frozenset[str] | None]:
        """Per source table, its columns on the provider (None: the provider has no such
        table)."""
        for route in active:
            name = route.source_type or route.table_name
            if name not in self._src_cols:
                self._src_cols[name] = _source_columns(provider, name)
        renamed = {r.table_name: self._src_cols[r.source_type] for r in active if r.source_type}
        if not renamed and not self._carried:
            return self._src_cols
        return {**self._src_cols, **renamed, **self._carried}

    def provider_types(self, provider: psycopg.Connection, active: list[Route]) -> dict[str, bool]:
        """Whether the provider has each of the subscriber's own column types."""
        wanted = {t for r in active if not r.builtin_types for t in r.types}
        missing = sorted(wanted - self._prov_types.keys())
        if missing:
            self._prov_types.update(_types_present(provider, missing))
        return self._prov_types


def provider_routes(routes: dict[str, Route], later: LaterChanges | None) -> dict[str, Route]:
    """``routes`` with each table that a script later in the batch renames under the name
    the provider knows it by now (the only name it knows) for its row type."""
    if later is None or not later.renamed:
        return routes
    return {
        t: replace(r, source_type=later.renamed[t]) if t in later.renamed else r
        for t, r in routes.items()
    }


def columns_carried(
    src_cols: dict[str, frozenset[str] | None], later: LaterChanges | None
) -> dict[str, frozenset[str] | None]:
    """The provider's columns of each table (today's) with those a script later in the
    batch takes away added back: the rows before that script still carry them."""
    if later is None or not later.going:
        return src_cols
    return {
        t: (c | later.going.get(t, set())) if c is not None else None for t, c in src_cols.items()
    }


def plan_inputs(
    shapes: TableShapes,
    settings: ReplaySettings,
    provider: psycopg.Connection,
    local: psycopg.Connection,
    routes: dict[str, Route],
    *,
    summary: list[SummaryRow] | None = None,
    batch_sql: str = "",
    later: LaterChanges | None = None,
) -> PlanInputs:
    """What the routes' plans need besides a summary (shapes read once, then cached).

    With the segment's ``summary`` (of ``batch_sql``), a table with columns here that the
    provider's catalog lacks is read with the columns its queued rows carry
    (:meth:`TableShapes.carried`); with ``later``, the columns that scripts later in the
    batch take away are added back (:func:`columns_carried`)."""
    active = [r for r in routes.values() if r.applies]
    src_cols = shapes.source_columns(provider, active)
    types = shapes.provider_types(provider, active)
    if summary is not None:
        # Which tables lack columns on the provider is decided first, for every table:
        # the summary then only picks those it has rows of.
        short = shapes.short_tables(active, src_cols)
        doubtful = _doubtful(summary, routes, short)
        if doubtful:
            src_cols = {**src_cols, **shapes.carried(provider, batch_sql, doubtful)}
    return PlanInputs(
        columns_carried(src_cols, later),
        types,
        _major(provider) == _major(local),  # COPY's binary format needs one major version
        settings.read_range_events,
        settings.read_ahead_events,
        settings.second_events,
        settings.merge_ranges,
    )


def _doubtful(
    summary: list[SummaryRow], routes: dict[str, Route], short: frozenset[str]
) -> dict[str, int]:
    """The segment's tables with rows whose columns here are not all on the provider
    (``short``, :meth:`TableShapes.short_tables`): name -> the ev_id of one of its row
    events."""
    out = {}
    for row in summary:
        route = routes.get(row.name) if row.name else None
        if route is None or not route.applies or route.handler.mode == "events":
            continue
        if row.row_events and row.first is not None and route.table_name in short:
            out[route.table_name] = row.first
    return out


def _major(conn: psycopg.Connection) -> int:
    return conn.info.server_version // 10000


def _source_columns(conn: psycopg.Connection, table_name: str) -> frozenset[str] | None:
    row = conn.execute(
        """
        select array_agg(attname) from pg_attribute
         where attrelid = to_regclass(%s) and attnum > 0 and not attisdropped
        """,
        (table_name,),
    ).fetchone()
    return frozenset(row[0]) if row and row[0] else None


def _row_keys(
    conn: psycopg.Connection, batch_sql: str, wanted: dict[int, str]
) -> dict[str, frozenset[str]]:
    """The keys of the row events of ``batch_sql`` with the ev_ids of ``wanted`` (ev_id ->
    the table's registry name): the columns they carry."""
    ids = ",".join(str(int(ev_id)) for ev_id in sorted(wanted))
    # batch_sql is the queue's own text (with braces: no sql.SQL.format).  The limit ends
    # the scan of a large batch once each row is found (each is a table's first).
    query = (
        "select e.ev_id, array(select json_object_keys(e.ev_data::json))"
        f" from ({batch_sql}) e where e.ev_id = any(array[{ids}]::bigint[])"
        f" limit {len(wanted)}"
    )
    try:
        rows = read_only_rows(conn, query)
    except psycopg.Error as exc:
        raise ReplayError(f"reading the batch's columns: {error_text(exc)}") from None
    return {wanted[ev_id]: frozenset(keys) for ev_id, keys in rows if ev_id in wanted}


def _types_present(conn: psycopg.Connection, type_names: list[str]) -> dict[str, bool]:
    """Which of ``type_names`` (SQL text, as in ``Route.types``) exist on ``conn``."""
    rows = conn.execute(
        "select t, to_regtype(t) is not null from unnest(%s::text[]) as t", (type_names,)
    ).fetchall()
    return {name: bool(present) for name, present in rows}
