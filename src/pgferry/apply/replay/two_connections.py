"""A large batch's tables applied on two subscriber connections at once.

A catch-up's batch is bounded by the subscriber's one applying backend: while it loads and
applies one table, the machine has CPU to spare.  A batch estimated at more than
``replay_second_events`` events therefore gives some of its tables to a second connection
to the node, applied by a thread of the worker in a transaction of its own, while the
worker's connection applies the others:

* which tables: those of the default handler (``bulk``) with a unique key, no TRUNCATE in
  the batch, no copy hand-over under way, and no trigger that fires in replay
  (``ENABLE REPLICA`` or ``ENABLE ALWAYS``: it might write rows the other connection
  writes too); the two connections' tables never overlap.  Foreign keys are no concern:
  replay runs as ``session_replication_role = replica``.  The tables are shared out by
  their row events, largest first, each to the connection with less work so far.
* exactly once: the second transaction writes one row per table into
  ``ferry.applied_part`` (with what it found missing here) and commits first; the main
  transaction then records the tick and deletes those rows.  A worker that failed or
  stopped between the two commits takes the same batch again (the provider keeps it open
  until the tick is recorded), finds the rows, skips those tables and counts their
  divergence from the rows (:meth:`SecondApply.already_applied`).
* what a reader of the subscriber sees: the second connection's tables reach the batch's
  end a moment (the main transaction's rest) before the others.  ``replay_second_events
  = 0`` keeps every batch in one transaction.

The second connection is opened on the first such batch and kept, like the readers; it
is closed with the worker's connections.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime

import psycopg

from pgferry.apply.replay.batch_sql import Segment
from pgferry.apply.replay.one_connection import ApplyStats, apply_segment_beside, apply_table
from pgferry.apply.replay.part_reads import ReaderPool
from pgferry.apply.replay.plan import SegmentPlan, TableWork
from pgferry.apply.replay.stage_tables import StageTables
from pgferry.db import connect
from pgferry.handlers.api import Handler
from pgferry.registry.routes import Route

log = logging.getLogger(__name__)

_Part = tuple[TableWork, Iterable[bytes]]  # a part with its COPY data, as read

APPLICATION_NAME = "pgferry-worker second apply"

# Destinations with a trigger that fires while replay runs as a replica (enabled
# REPLICA or ALWAYS), on the table or any of its partitions.
_FIRING_TRIGGERS = """
select distinct d.dest
  from unnest(%s::text[]) as d(dest)
  join pg_partition_tree(d.dest::regclass) as p on true
  join pg_trigger t on t.tgrelid = p.relid
 where not t.tgisinternal and t.tgenabled in ('R', 'A')
"""


def may_apply_apart(route: Route) -> bool:
    """Whether ``route``'s rows may be applied on the second connection (see module
    doc; triggers are looked up separately)."""
    return (
        route.handler.mode == "rows"
        and type(route.handler).apply is Handler.apply
        and not route.keyless
        and route.key_unique
        and not route.copy_snapshot
    )


def share_out(works: list[TableWork], eligible: Callable[[TableWork], bool]) -> frozenset[str]:
    """The tables for the second connection: by their row events, largest first, each to
    the connection with less so far (the main one has every table not eligible)."""
    rows: dict[str, int] = {}
    main_load = 0
    for work in works:
        if work.barrier is None and eligible(work):
            rows[work.table_name] = rows.get(work.table_name, 0) + work.rows
        else:
            main_load += work.rows
    second: set[str] = set()
    second_load = 0
    for name, count in sorted(rows.items(), key=lambda kv: (-kv[1], kv[0])):
        if second_load < main_load:
            second.add(name)
            second_load += count
        else:
            main_load += count
    return frozenset(second)


class SecondApply:
    """The worker's second connection to its node, and the tables' record on it."""

    def __init__(self) -> None:
        self.dsn = ""
        self.conn: psycopg.Connection | None = None
        self.stages = StageTables()
        self._firing: dict[tuple[str, ...], frozenset[str]] = {}
        # Rows of an earlier attempt may be left (a new process, or a batch that failed):
        # read them before the next batch.
        self.maybe_left = True
        self._has_table: bool | None = None

    def use_node(self, dsn: str) -> None:
        if dsn != self.dsn:
            self.close()
            self.dsn = dsn
            self._has_table = None
        self.maybe_left = True

    def forget_tables(self) -> None:
        """What was learnt of the tables (their triggers, the stages) may have changed."""
        self._firing.clear()
        self.stages.reset()

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None
        self.forget_tables()

    def available(self, local: psycopg.Connection) -> bool:
        """The node has the schema version with ``ferry.applied_part`` (an older one is
        upgraded by ``create-node``/``upgrade``; until then batches stay in one
        transaction)."""
        if not self.dsn:
            return False
        if self._has_table is None:
            row = local.execute("select to_regclass('ferry.applied_part') is not null").fetchone()
            self._has_table = bool(row and row[0])
        return self._has_table

    def eligible(
        self, local: psycopg.Connection, routes: Iterable[Route]
    ) -> Callable[[TableWork], bool]:
        """A test of the works whose tables may go to the second connection."""
        candidates = sorted({r.dest_fq for r in routes if may_apply_apart(r)})
        key = tuple(candidates)
        firing = self._firing.get(key)
        if firing is None:
            rows = local.execute(_FIRING_TRIGGERS, (candidates,)).fetchall() if candidates else []
            firing = frozenset(r[0] for r in rows)
            self._firing = {key: firing}
        return lambda w: may_apply_apart(w.route) and w.route.dest_fq not in firing

    # --- what an earlier attempt applied -----------------------------------------------
    def already_applied(
        self, local: psycopg.Connection, queue: str, consumer: str, tick_id: int
    ) -> tuple[frozenset[str], ApplyStats]:
        """Tables of this batch that a second transaction applied and committed before the
        batch failed or the worker stopped, and what it found.  Rows of another batch
        (the provider's batch changed since: a new provider) are dropped; their tables are
        applied again, which the default handler does idempotently."""
        stats = ApplyStats()
        if not self.maybe_left or not self.available(local):
            return frozenset(), stats
        rows = local.execute(
            "select tick_id, table_name, dest, upserts, deletes, recreated, missing_deletes"
            "  from ferry.applied_part where queue_name = %s and consumer_name = %s",
            (queue, consumer),
        ).fetchall()
        done = set()
        for tick, table, dest, upserts, deletes, recreated, missing in rows:
            if tick != tick_id:
                log.warning(
                    "%s: applied at tick %s by a batch never recorded; applied again", table, tick
                )
                continue
            done.add(table)
            stats.upserts += upserts
            stats.deletes += deletes
            stats.recreated += recreated
            stats.missing_deletes += missing
            stats.tables.add(table)
            if recreated or missing:
                stats.diverged[dest] = (recreated, missing)
        if done:
            log.info("batch at tick %s: %d tables applied before: %s", tick_id, len(done),
                     ", ".join(sorted(done)))  # fmt: skip
        return frozenset(done), stats

    def forget(self, local: psycopg.Connection, queue: str, consumer: str) -> None:
        """In the main transaction that records the tick: the consumer's rows go."""
        if not self.available(local):
            return
        local.execute(
            "delete from ferry.applied_part where queue_name = %s and consumer_name = %s",
            (queue, consumer),
        )

    # --- one batch ---------------------------------------------------------------------
    def _connection(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed:
            conn = connect(self.dsn, application_name=APPLICATION_NAME)
            try:
                # As the worker's own connection: durable commits, replica role.
                conn.execute("set synchronous_commit = on")
                conn.execute("set session_replication_role = replica")
                conn.commit()
            except BaseException:
                conn.close()
                raise
            self.conn = conn
            self.stages.reset()
        return self.conn

    def start(
        self,
        parts: Iterator[tuple[TableWork, Iterable[bytes]]],
        *,
        queue: str,
        consumer: str,
        tick_id: int,
        tick_time: datetime | None,
    ) -> SecondRun:
        """Apply ``parts`` on the second connection in a thread; see :class:`SecondRun`."""
        conn = self._connection()
        run = SecondRun(self, conn, parts, queue, consumer, tick_id, tick_time)
        self.maybe_left = True  # until the main transaction has recorded the tick
        run.thread.start()
        return run


class SecondRun:
    """One batch's tables on the second connection: applied, recorded in
    ``ferry.applied_part`` and committed in a thread; :meth:`outcome` returns what it did or
    raises what failed it, :meth:`abort` stops it (the main transaction failed)."""

    def __init__(
        self,
        owner: SecondApply,
        conn: psycopg.Connection,
        parts: Iterator[tuple[TableWork, Iterable[bytes]]],
        queue: str,
        consumer: str,
        tick_id: int,
        tick_time: datetime | None,
    ) -> None:
        self.owner, self.conn, self.parts = owner, conn, parts
        self.queue, self.consumer = queue, consumer
        self.tick_id, self.tick_time = tick_id, tick_time
        self.stats = ApplyStats()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="pgferry-apply-2", daemon=True)

    def _run(self) -> None:
        try:
            with self.conn.transaction():
                self.owner.stages.new_transaction()
                applied: dict[str, tuple[str, ApplyStats]] = {}
                for work, chunks in self.parts:
                    done = apply_table(
                        self.conn, self.owner.stages, work, [chunks], self.tick_id, self.tick_time
                    )
                    applied.setdefault(work.table_name, (work.route.dest_text, ApplyStats()))
                    applied[work.table_name][1].add(done)
                    self.stats.add(done)
                self._record(applied)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread by outcome()
            self.error = exc
            self.owner.stages.reset()  # stages made in the failed transaction are gone

    def _record(self, applied: dict[str, tuple[str, ApplyStats]]) -> None:
        rows = []
        for table, (dest, done) in applied.items():
            rows.append((self.queue, self.consumer, self.tick_id, table, dest, done.upserts,
                         done.deletes, done.recreated, done.missing_deletes))  # fmt: skip
        with self.conn.cursor() as cur:
            cur.executemany(
                "insert into ferry.applied_part (queue_name, consumer_name, tick_id,"
                " table_name, dest, upserts, deletes, recreated, missing_deletes)"
                " values (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )

    def outcome(self) -> ApplyStats:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.stats

    def abort(self) -> None:
        """Stop the thread (its reads are stopped by the caller) and wait for it: a
        transaction not yet committed rolls back."""
        if self.thread.is_alive():
            with contextlib.suppress(Exception):
                self.conn.cancel_safe(timeout=5)
        self.thread.join()
        if self.error is not None:
            self.owner.close()  # cut off mid-statement: a new connection next time


class TwoConnections:
    """A segment's parts read by reader threads (``pool``) as two streams and applied on
    two connections at once: the tables named in ``apart`` on the second one
    (:class:`SecondApply`), the others on the worker's
    (:func:`pgferry.apply.replay.one_connection.apply_segment_beside`, the caller's transaction,
    still open when the second has committed)."""

    def __init__(
        self,
        pool: ReaderPool,
        stages: StageTables,
        second: SecondApply,
        apart: frozenset[str],
        *,
        queue: str,
        consumer: str,
        tick_id: int,
        tick_time: datetime | None,
    ) -> None:
        self.pool, self.stages, self.second, self.apart = pool, stages, second, apart
        self.queue, self.consumer = queue, consumer
        self.tick_id, self.tick_time = tick_id, tick_time

    def read(
        self, plan: SegmentPlan, batch_sql: str, segment: Segment
    ) -> AbstractContextManager[tuple[Iterator[_Part], Iterator[_Part]]]:
        return self.pool.split_parts(plan.tables, batch_sql, segment, self.apart)

    def apply(
        self,
        conn: psycopg.Connection,
        plan: SegmentPlan,
        parts: AbstractContextManager[tuple[Iterator[_Part], Iterator[_Part]]],
    ) -> ApplyStats:
        log.debug(
            "tick %s: %s on the second connection", self.tick_id, ", ".join(sorted(self.apart))
        )
        return apply_segment_beside(
            conn, self.stages, plan, parts, self,
            queue=self.queue, tick_id=self.tick_id, tick_time=self.tick_time,
        )  # fmt: skip

    def start(self, parts: Iterator[_Part]) -> SecondRun:
        """The second connection's parts, applied in a thread (called by the apply once the
        reads are entered)."""
        return self.second.start(
            parts,
            queue=self.queue,
            consumer=self.consumer,
            tick_id=self.tick_id,
            tick_time=self.tick_time,
        )
