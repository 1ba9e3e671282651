"""How one batch's segments are read, and each segment's plan.

:class:`Reading` is what the apply (:mod:`.batch`) decided for a batch once its summary
was read: by Spark tasks, by reader threads ahead of the apply or inline, with a second
subscriber connection or not.  :func:`plan_inputs` gathers what a plan needs beside a
summary (the tables' shapes, cached by :class:`~pgferry.apply.read.TableShapes`, and the
replay settings); :func:`segment_plan` plans one segment with them
(:meth:`~pgferry.apply.plan.PlanInputs.plan`).  Both run on the worker's thread; the
only statements they send are the provider's catalog reads of shapes not yet cached, the
columns a table's queued rows carry when the catalog's differ from the subscriber's, and
a segment's summary when the batch's own does not serve (the segments between scripts).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from pgferry.apply.batch_sql import Segment, SummaryRow
from pgferry.apply.plan import PlanInputs, SegmentPlan, apply_columns
from pgferry.apply.read import TableShapes, summarize
from pgferry.apply.script_shapes import LaterChanges
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.registry.routes import Route


@dataclass(frozen=True)
class Reading:
    """How the segments of one batch are read."""

    queue: str
    batch_id: int
    tick_id: int
    tick_time: datetime | None
    batch_sql: str
    seqs: list[str]
    use_spark: bool  # by Spark tasks (the session is up and the batch is large)
    read_ahead: bool  # by reader threads ahead of the apply (else inline)
    started: bool = False  # its reads were started while the batch before it was applied
    apart: bool = False  # some tables may go to the second connection (second_apply.py)
    consumer: str = ""


def plan_inputs(
    shapes: TableShapes,
    settings: ReplaySettings,
    provider: psycopg.Connection,
    local: psycopg.Connection,
    routes: dict[str, Route],
) -> PlanInputs:
    """What the routes' plans need besides a summary (shapes read once, then cached)."""
    active = [r for r in routes.values() if r.applies]
    return PlanInputs(
        shapes.source_columns(provider, active),
        shapes.provider_types(provider, active),
        _major(provider) == _major(local),  # COPY's binary format needs one major version
        settings.read_range_events,
        settings.read_ahead_events,
        settings.second_events,
        settings.merge_ranges,
    )


def segment_plan(
    provider: psycopg.Connection,
    reading: Reading,
    routes: dict[str, Route],
    segment: Segment,
    summary: list[SummaryRow] | None,
    inputs: PlanInputs,
    later: LaterChanges | None = None,
    shapes: TableShapes | None = None,
) -> SegmentPlan:
    """The segment's plan (``routes`` as the provider's catalog shows them); without
    ``summary`` the segment's own is read first.  With ``shapes``, a table with columns
    here that the provider's catalog lacks is read with the columns its queued rows carry
    (:meth:`~pgferry.apply.read.TableShapes.carried`)."""
    if summary is None:
        summary = summarize(provider, reading.batch_sql, routes, reading.seqs, segment)
    src_cols = inputs.src_cols
    if shapes is not None:
        doubtful = _doubtful(summary, routes, src_cols)
        if doubtful:
            src_cols = {**src_cols, **shapes.carried(provider, reading.batch_sql, doubtful)}
    if later is not None:
        src_cols = later.columns_carried(src_cols)
    return inputs.plan(
        summary,
        routes,
        reading.seqs,
        ranges=reading.read_ahead or reading.use_spark,
        # A Spark task hands its whole part to the driver: there ranges bound memory.
        # Two applying connections: a table in ranges starts its apply after a range.
        whole_updates=not reading.use_spark and not reading.apart,
        source_columns=src_cols,
    )


def _doubtful(
    summary: list[SummaryRow],
    routes: dict[str, Route],
    src_cols: dict[str, frozenset[str] | None],
) -> dict[str, int]:
    """The segment's tables with rows whose columns here are not all on the provider
    (name -> the ev_id of one of its row events): a column of the subscriber's own, or
    one a later script renamed or dropped on the provider while its rows wait here, or
    the whole table renamed there."""
    out = {}
    for row in summary:
        route = routes.get(row.name) if row.name else None
        if route is None or not route.applies or route.handler.mode == "events":
            continue
        src = src_cols.get(route.table_name)
        if not row.row_events or row.first is None:
            continue
        # None: no such table on the provider (a later script renamed it).
        if src is None or apply_columns(route, src) != apply_columns(route, None):
            out[route.table_name] = row.first
    return out


def _major(conn: psycopg.Connection) -> int:
    return conn.info.server_version // 10000
