"""A small batch's subscriber transaction in two round trips.

Applied table by table, a batch of a few dozen events costs the subscriber about a dozen
round trips: BEGIN, per table the stage ``COPY`` (two: its start and its end) and the
handler's statements, the tick record, ``COMMIT``.  Under a steady load each one also waits
for a core, and together they were about 13 ms of a 33 ms cycle (BENCHMARKS.md).

Here the provider reads each table's collapsed rows (the same queries,
:meth:`TableWork.query <pgferry.apply.replay.plan.TableWork.query>`) as one array of the rows'
text forms, all tables in one message and one read-only transaction.  The subscriber then
gets, in psycopg's pipeline mode and before it is asked for any result: BEGIN, per table
an INSERT of that array into the table's stage and the default handler's statements
(:func:`pgferry.handlers.upsert.queue_rows`), the sequences and the tick record, whose
result is the first read (one round trip).  The handlers' counts are read then, the
divergence recorded, and ``COMMIT`` is the second.

With the batch's tick range as parameters (:class:`~pgferry.apply.replay.read.PreparedBatch`),
the summary and the reads are the same texts at every batch: each is prepared once per
provider session and run with a generic plan instead of being planned at every batch.

Only what the table-by-table path would read inline qualifies (:func:`qualifies`): a
batch of the node's own stream, estimated at most ``replay_read_ahead_events``, without
scripts, removals, TRUNCATEs or forwarding, whose every table has the default apply on a
unique key.  A batch that fails here is rolled back and the caller applies it again table
by table, whose error names the table.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pgferry.apply.replay.batch_end import record_divergence
from pgferry.apply.replay.batch_sql import Segment
from pgferry.apply.replay.one_connection import (
    ApplyStats,
    applied_stats,
    apply_sequences,
    staged_part,
    tagged_stats,
)
from pgferry.apply.replay.plan import SegmentPlan, TableWork
from pgferry.apply.replay.read import (
    PreparedBatch,
    provider_named,
    read_only_results,
)
from pgferry.apply.replay.stage_tables import StageTables
from pgferry.handlers import Applied, Handler, upsert
from pgferry.node import model
from pgferry.queue.batches import Batch, EventRange

log = logging.getLogger(__name__)


def qualifies(plan: SegmentPlan) -> bool:
    """Every part of ``plan`` is a whole table applied by the default set-based apply on
    a unique key, and nothing is truncated."""
    return not plan.truncate and all(plain(work) for work in plan.tables)


def plain(work: TableWork) -> bool:
    route = work.route
    return (
        not work.events
        and not route.keyless
        and route.key_unique
        and work.span is None
        and not work.merge
        and type(route.handler).apply is Handler.apply
    )


# At most this many tables are read with the summary, before it says which the batch holds.
GUESSED_TABLES = 8
# A table's rows larger than this are not read as one value (a COPY streams them): a
# batch of 2,000 events can hold rows of any size, and a value is at most 1 GB.
ARRAY_BYTES = 16 * 1024 * 1024

Arrays = dict[str, tuple[int, str | None]]  # an array read's query -> (rows, array)


def read_form(batch_sql: str, prepared: PreparedBatch | None) -> tuple[str, EventRange | None]:
    """The event query the reads are composed on, and its parameters' values if any."""
    if prepared is None:
        return batch_sql, None
    return prepared.sql, prepared.events


def array_query(query: str) -> str:
    """A table's rows, counted, and as one array unless they are larger than
    :data:`ARRAY_BYTES` (the array is then NULL: the batch is applied table by table)."""
    return (
        "with r as (" + query + ") select (select count(*) from r),"
        " case when (select coalesce(sum(pg_column_size(r.*)), 0) from r) <= "
        + str(ARRAY_BYTES)
        + " then (select array_agg(r)::text from r) end"
    )


def counted(rows: list[tuple[Any, ...]]) -> tuple[int, str | None]:
    return (rows[0][0], rows[0][1]) if rows else (0, None)


def read_arrays(
    provider: psycopg.Connection,
    works: list[TableWork],
    batch_sql: str,
    segment: Segment,
    events: EventRange | None = None,
) -> list[tuple[int, str | None]]:
    """Each table's ``(rows, array of the rows' text forms)``, in one read-only
    transaction: on an idle autocommit connection one message, one round trip.
    ``events``: ``batch_sql`` is the generic event query, these its parameters."""
    queries = [array_query(work.query(batch_sql, segment)) for work in works]
    with provider_named(provider):
        results = read_only_results(provider, queries, events=events) if queries else []
    return [counted(rows) for rows in results]


@dataclass
class ArrayReads:
    """What :meth:`SmallBatch.read` read: each table's ``(rows, array)``, in the plan's
    order, with the query it was read by and which of them were read after the summary."""

    read: list[tuple[int, str | None]]
    wanted: list[str]
    late: set[str]
    started: float  # when the read began (the apply's time counts from it)
    seconds: float  # how long it took


class SmallBatch:
    """A batch's whole apply in two round trips, as a way with the same two steps as a
    segment's (:class:`~pgferry.apply.replay.one_connection.SegmentWay`): :meth:`read`, then
    :meth:`apply`, which records the batch's tick and commits.  Either declines (None, with
    nothing done) when the plan does not :func:`qualify <qualifies>`, a table's rows are
    larger than :data:`ARRAY_BYTES`, or after a failure here (rolled back): the caller
    applies the batch table by table, whose error names the table.  ``arrays``: the reads
    made with the summary; ``prepared``: its generic event query
    (:func:`pgferry.apply.replay.summary.read_summary`)."""

    def __init__(
        self,
        provider: psycopg.Connection,
        stages: StageTables,
        batch: Batch,
        node: model.NodeInfo,
        *,
        arrays: Arrays | None = None,
        prepared: PreparedBatch | None = None,
    ) -> None:
        self.provider, self.stages, self.batch, self.node = provider, stages, batch, node
        self.arrays, self.prepared = arrays, prepared

    def read(self, plan: SegmentPlan, batch_sql: str) -> ArrayReads | None:
        """The plan's tables as arrays: those the summary did not read, in one message on
        the provider now (``batch_sql``: the batch's event query)."""
        if not qualifies(plan):
            return None
        try:
            return self._read(plan, read_form(batch_sql, self.prepared))
        except psycopg.Error as exc:
            if self.provider.broken:
                raise
            self.stages.reset()  # as after any failure here
            log.debug("batch %s: applied table by table after: %s", self.batch.batch_id, exc)
            return None

    def _read(self, plan: SegmentPlan, form: tuple[str, EventRange | None]) -> ArrayReads | None:
        started = time.monotonic()
        text, events = form
        found = self.arrays or {}
        wanted = [array_query(work.query(text, Segment())) for work in plan.tables]
        missing = [(w, q) for w, q in zip(plan.tables, wanted, strict=True) if q not in found]
        if missing:  # the tables not read with the summary, in one message now
            late = read_arrays(self.provider, [w for w, _ in missing], text, Segment(), events)
            found = {**found, **{q: got for (_, q), got in zip(missing, late, strict=True)}}
        read = [found[query] for query in wanted]
        read_s = time.monotonic() - started
        if any(rows and array is None for rows, array in read):
            log.debug("batch %s: rows too large for one array", self.batch.batch_id)
            return None
        return ArrayReads(read, wanted, {q for _, q in missing}, started, read_s)

    def apply(
        self, local: psycopg.Connection, plan: SegmentPlan, read: ArrayReads | None
    ) -> ApplyStats | None:
        """Apply ``plan`` (the whole batch) from ``read`` and record its tick, committed, in
        two round trips on ``local``; None when the read or this apply declined."""
        if read is None:
            return None
        try:
            return self._apply(local, plan, read)
        except psycopg.Error as exc:
            if local.broken or self.provider.broken:
                raise
            self.stages.reset()  # stages created in the rolled-back transaction are gone
            log.debug("batch %s: applied table by table after: %s", self.batch.batch_id, exc)
            return None

    def _apply(self, local: psycopg.Connection, plan: SegmentPlan, got: ArrayReads) -> ApplyStats:
        batch, node, stages = self.batch, self.node, self.stages
        queue, consumer = node.queue_name, node.consumer_name
        stats = ApplyStats(small=True)
        with local.pipeline(), local.transaction():
            stages.new_transaction()
            counts: list[tuple[TableWork, Callable[[], Applied]]] = []
            for work, (rows, array) in zip(plan.tables, got.read, strict=True):
                if rows:
                    stage = _load(local, stages, work, array)
                    part = staged_part(local, work, stage, rows, batch.tick_id, batch.tick_time)
                    counts.append((work, upsert.queue_rows(part)))
                else:
                    stats.tables.add(work.table_name)
            stats.sequences = apply_sequences(local, queue, plan.sequences)
            # Its result is the first one read: everything above is sent with it.
            model.record_tick(local, queue, consumer, batch.tick_id, batch.tick_time,
                              batch.prev_tick_id, node.provider_node,
                              tables=sorted({w.table_name for w in plan.tables}))  # fmt: skip
            for work, applied in counts:
                stats.add(tagged_stats(work.route, applied_stats(applied())))
            if log.isEnabledFor(logging.DEBUG):
                for work, query, (rows, _) in zip(plan.tables, got.wanted, got.read, strict=True):
                    log.debug(
                        "  %s: %d rows (%s, then with the batch's other tables: staged and"
                        " applied in one round trip)", work.table_name, rows,
                        f"read wait {got.seconds:.3f}s" if query in got.late
                        else "read with the summary",
                    )  # fmt: skip
            stats.apply_seconds = time.monotonic() - got.started
            record_divergence(local, queue, consumer, stats, tick_id=batch.tick_id)
            commit_at = time.monotonic()
        stats.commit_seconds = time.monotonic() - commit_at
        return stats


def _load(
    local: psycopg.Connection, stages: StageTables, work: TableWork, array: str | None
) -> sql.Composable:
    """The table's stage, loaded from the array (the stage's own row type parses it)."""
    stage = stages.get(local, work.route, work.columns)
    local.execute(_load_statement(stage.as_string(local)), (array,))
    return stage


@functools.lru_cache(maxsize=256)
def _load_statement(stage: str) -> str:
    return f"insert into {stage} select * from unnest(%s::{stage}[])"
