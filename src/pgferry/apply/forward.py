"""Branch nodes pass every event of a batch on to their own queue, keeping ev_id.

The copy happens in the transaction that applies the batch, so forwarded events and the
applied tick commit together.  The matching tick (same id, time and event position as the
provider's) is made after that commit: a tick made inside it would not see the forwarded
events as committed.  A crash between the commit and the tick is repaired the next time the
batch is seen (:func:`ensure_tick` is idempotent).

A table's handler may filter or rewrite what is passed on (``forward_filtered``,
``forward_event``; see :mod:`pgferry.handlers`): the filter runs on the provider with the
SELECT, the rewrite here, event by event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from pgferry import expressions
from pgferry.handlers import Event
from pgferry.handlers.api import Handler
from pgferry.queue import api as queue_api
from pgferry.queue import ticks as queue_ticks
from pgferry.queue.batches import Batch
from pgferry.registry.routes import Route, split_name


def forward_events(
    local: psycopg.Connection,
    provider: psycopg.Connection,
    queue: str,
    batch_sql: str,
    routes: Mapping[str, Route] | None = None,
) -> int:
    """Copy the batch's events into the local queue's current event table."""
    routes = routes or {}
    filtered = [r for r in routes.values() if r.handler.forward_filtered and r.source_filter]
    cols = sql.SQL(", ").join(_column(c, filtered) for c in queue_api.FORWARDED_COLUMNS)
    where = sql.SQL(" and ").join([sql.SQL("true"), *(_keep(r) for r in filtered)])
    # In ev_id order, as the provider's queue holds them.
    query = sql.SQL("select {} from ({}) e where {} order by e.ev_id").format(
        cols, sql.SQL(batch_sql), where
    )
    rows = provider.execute(query).fetchall()
    rewriters = {t: r.handler for t, r in routes.items() if r.handler.rewrites_forwarded()}
    if rewriters:
        rows = _rewrite(rows, rewriters)
    if not rows:
        return 0
    return queue_api.forward_events(local, queue, rows)


def _image(route: Route, expr: str) -> sql.Composable:
    return expressions.on_row_image(expr, split_name(route.table_name))


def _row_event(route: Route) -> sql.Composable:
    return sql.SQL("(e.ev_extra1 = {} and e.ev_type like '_:%')").format(
        sql.Literal(route.table_name)
    )


def _keep(route: Route) -> sql.Composable:
    """Row events failing the handler's key filter stay behind."""
    if not route.key_filter:
        return sql.SQL("true")
    return sql.SQL("(not {} or coalesce({}, false))").format(
        _row_event(route), _image(route, route.key_filter)
    )


def _column(name: str, filtered: list[Route]) -> sql.Composable:
    """ev_type turns into a delete ('D:...') where an image fails a filter on other columns
    than the key: the row left what the branch keeps."""
    ident = sql.SQL("e.{}").format(sql.Identifier(name))
    conds = [r for r in filtered if r.image_condition]
    if name != "ev_type" or not conds:
        return ident
    cases = sql.SQL(" ").join(
        sql.SQL("when {} and not coalesce({}, false) then 'D:' || substr(e.ev_type, 3)").format(
            _row_event(r), _image(r, r.image_condition or "true")
        )
        for r in conds
    )
    return sql.SQL("case {} else e.ev_type end").format(cases)


def _rewrite(
    rows: list[tuple[Any, ...]], rewriters: Mapping[str, Handler]
) -> list[tuple[Any, ...]]:
    """Each event of a table whose handler rewrites forwarded events, through it."""
    out = []
    for row in rows:
        handler = rewriters.get(row[queue_api.FORWARDED_COLUMNS.index("ev_extra1")])
        if handler is None:
            out.append(row)
            continue
        event = handler.forward_event(Event(*row))
        if event is not None:
            out.append(tuple(getattr(event, c) for c in queue_api.FORWARDED_COLUMNS))
    return out


def ensure_tick(local: psycopg.Connection, queue: str, batch: Batch) -> None:
    """Make the provider's tick locally unless it exists (autocommitted on its own)."""
    with local.transaction():
        if not queue_ticks.tick_exists(local, queue, batch.tick_id):
            queue_ticks.external_tick(
                local, queue, batch.tick_id, batch.tick_time, batch.event_seq or 0
            )
