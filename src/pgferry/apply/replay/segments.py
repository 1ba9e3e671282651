"""One segment of a batch applied: the part of the batch between queued scripts, inside
the batch's transaction.

A segment's replay runs one way through its stages: what the provider has of its tables
(:func:`pgferry.apply.replay.shapes.plan_inputs`, with the segment's summary), its plan
(:meth:`~pgferry.apply.replay.plan.PlanInputs.plan`), the way it is replayed, made from the
batch's :class:`~pgferry.apply.replay.strategy.Strategy` (:meth:`.ways.Ways.make`:
its parts read inline, by reader threads or by Spark tasks, applied on the worker's
connection or shared with a second one; the next batch's reads started meanwhile), then
the way's ``read`` and ``apply``.
"""

from __future__ import annotations

import psycopg

from pgferry.apply.replay import shapes
from pgferry.apply.replay.batch_sql import Segment, SummaryRow
from pgferry.apply.replay.one_connection import ApplyStats
from pgferry.apply.replay.script_shapes import LaterChanges
from pgferry.apply.replay.ways import Reading, Ways
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.registry.routes import Route


class Segments:
    """The segments of the worker's batches: each planned with what was learnt of the
    tables' shapes, then replayed its strategy's way (:class:`~pgferry.apply.replay.ways.Ways`)."""

    def __init__(self, table_shapes: shapes.TableShapes, ways: Ways) -> None:
        self.shapes = table_shapes
        self.ways = ways

    def replay(
        self,
        settings: ReplaySettings,
        local: psycopg.Connection,
        provider: psycopg.Connection,
        reading: Reading,
        routes: dict[str, Route],
        segment: Segment,
        summary: list[SummaryRow],
        later: LaterChanges | None = None,
        done: frozenset[str] = frozenset(),
    ) -> ApplyStats:
        """Apply one segment of ``reading``'s batch (``summary``: its own) in the open
        transaction on ``local``; the tables in ``done`` were applied already."""
        how = reading.how
        # The provider's catalog already shows what scripts later in the batch change.
        routes = shapes.provider_routes(routes, later)
        inputs = shapes.plan_inputs(
            self.shapes,
            settings,
            provider,
            local,
            routes,
            summary=summary,
            batch_sql=reading.batch_sql,
            later=later,
        )
        plan = inputs.plan(
            summary,
            routes,
            reading.seqs,
            ranges=how.ranges,
            whole_updates=how.whole_updates,
        )
        plan.tables = [w for w in plan.tables if w.table_name not in done]
        way = self.ways.make(reading, plan, segment, settings, local, provider, routes)
        # The parts as the way reads them, handed to its apply, which enters them (no read
        # starts before it does).
        return way.apply(local, plan, way.read(plan, reading.batch_sql, segment))
