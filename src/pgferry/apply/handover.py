"""Initial copy of newly attached tables beside replay, and the exact hand-over to it.

A group of tables (one add-table or resync command: same ``copy_group``) is copied in a
thread of the worker's own (:class:`CopyRun`) from ONE exported snapshot C, while the main
loop keeps applying batches to the node's other tables.  The group's events must neither
be lost nor applied twice, so:

1. Before C is taken, a consumer of the group's own (``copy_consumer``) is registered on
   the provider at its newest tick L0: every event not visible in L0 stays in the queue
   for it, however far the main stream moves on meanwhile.  The tables are ``in-copy``:
   the main stream skips their events.
2. After the copy the tables are ``catching-up``: the worker replays the group's
   consumer's batches for these tables only (:func:`catchup_step`), skipping events
   visible in C (they are in the copy), each batch in one local transaction that also
   records ``catchup_tick``.
3. When ``catchup_tick`` equals the main stream's last tick, the tables turn ``ok`` and
   the group's consumer is dropped: the next main batch starts exactly where the group
   stopped.  When the group's batch went past the main stream's tick, the main stream
   takes one tick per batch until it gets there.
4. The main stream keeps skipping events visible in C until an applied tick's snapshot
   has xmin >= xmax(C): no such event can come any more and ``copy_snapshot`` is cleared.

A crash during the copy leaves ``in-copy``: the copy starts again (it truncates first).
A crash during the catch-up is met like the main stream's: the group's recorded tick is
the truth, the provider's position follows it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import conninfo

from pgferry.db import connect
from pgferry.errors import PgferryError, QueueError, TableError
from pgferry.expressions import conjunction
from pgferry.handlers import registry as handler_registry
from pgferry.node import capture
from pgferry.queue import api as queue_api

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CopyGroup:
    """Tables waiting for their copy, copied together under one snapshot."""

    group_id: str  # the copy_group, or the table's name when it has none
    tables: tuple[str, ...]
    dest_tables: tuple[str, ...]
    conditions: tuple[str | None, ...]
    skip_truncate: tuple[bool, ...]
    max_parallel: int | None  # --max-parallel-copy: Spark tasks copying at once
    # Per table, its handler's column expressions (conditions include its row filter) and
    # the settings they read (may be secret: never shown).
    column_exprs: tuple[tuple[tuple[str, str], ...], ...] = ()
    excluded: tuple[tuple[str, ...], ...] = ()  # per table: columns its capture ignores
    settings: tuple[tuple[tuple[str, str], ...], ...] = field(default=(), repr=False)
    only: tuple[tuple[str, ...] | None, ...] = ()  # per table: the only columns copied


@dataclass(frozen=True)
class CatchUp:
    """A copied group replaying its own consumer's batches."""

    consumer: str
    tables: tuple[str, ...]
    tick: int  # last tick applied for the group here


def pending_groups(conn: psycopg.Connection, queue: str) -> list[CopyGroup]:
    """Groups of tables waiting for their copy (state NULL, or ``in-copy`` after a crash),
    oldest first."""
    rows = conn.execute(
        """
        select coalesce(copy_group::text, table_name), table_name,
               coalesce(dest_table, table_name), copy_condition, skip_truncate,
               max_parallel_copy, table_attrs
          from ferry.table_info
         where queue_name = %s and local and (merge_state is null or merge_state = 'in-copy')
         order by copy_group nulls last, table_name
        """,
        (queue,),
    ).fetchall()
    groups: dict[str, list[tuple]] = {}
    for row in rows:
        groups.setdefault(row[0], []).append(row)
    result = []
    for group_id, members in groups.items():
        caps = [m[5] for m in members if m[5]]
        hs = [handler_registry.from_attrs(m[6]) for m in members]  # the tables' handlers
        # The capture's when= filters the copy too; its ignored columns are not copied.
        specs = [capture.copy_filter(m[3], m[6]) for m in members]
        filters = [conjunction(f[0], h.row_filter()) for f, h in zip(specs, hs, strict=True)]
        result.append(
            CopyGroup(
                group_id,
                tuple(m[1] for m in members),
                tuple(m[2] for m in members),
                tuple(filters),
                tuple(bool(m[4]) for m in members),
                min(caps) if caps else None,
                tuple(tuple(h.copy_column_exprs().items()) for h in hs),
                tuple(f[1] for f in specs),
                tuple(tuple(h.copy_settings().items()) for h in hs),
                tuple(None if (o := h.copy_columns()) is None else tuple(o) for h in hs),
            )
        )
    return result


def catching_up(conn: psycopg.Connection, queue: str) -> list[CatchUp]:
    """Copied groups that replay their own consumer's batches."""
    rows = conn.execute(
        """
        select copy_consumer, array_agg(table_name order by table_name), min(catchup_tick)
          from ferry.table_info
         where queue_name = %s and local and merge_state = 'catching-up'
           and copy_consumer is not null
         group by copy_consumer order by 1
        """,
        (queue,),
    ).fetchall()
    return [CatchUp(r[0], tuple(r[1]), r[2]) for r in rows]


def provider_not_ready(prov: psycopg.Connection, queue: str, tables: list[str]) -> list[str]:
    """Tables that the provider does not yet hold in state ok (we must wait for those)."""
    rows = prov.execute(
        """
        select t.name from unnest(%s::text[]) as t(name)
         where not exists (select 1 from ferry.table_info i
                            where i.queue_name = %s and i.table_name = t.name
                              and i.local and i.merge_state = 'ok')
        """,
        (tables, queue),
    ).fetchall()
    return [r[0] for r in rows]


# --- the copy, in a thread ----------------------------------------------------------------


@dataclass
class CopyRun:
    """One group's copy, run by a thread beside the worker's loop.

    The thread opens connections of its own (the loop's are not thread-safe), holds a
    session lock on the group so that no other worker process copies it at the same time,
    and submits its Spark job under a job group of its own so that :meth:`cancel` can stop
    it when the worker stops.
    """

    group: CopyGroup
    queue: str
    main_consumer: str
    local_dsn: str
    provider_dsn: str
    spark_factory: Callable[[], object]
    thread: threading.Thread | None = None
    error: str | None = None
    waiting: bool = False  # the provider does not hold the tables in state ok yet
    cancelled: threading.Event = field(default_factory=threading.Event)
    _job_group: str = field(default_factory=lambda: f"pgferry-copy-{uuid.uuid4().hex[:12]}")
    _spark: Any = None  # the session, once the copy asked for it

    @property
    def consumer(self) -> str:
        return f"{self.main_consumer}.copy.{self.group.group_id}"

    def start(self) -> None:
        self.thread = threading.Thread(
            target=self._run, name=f"pgferry-copy-{self.group.group_id}", daemon=True
        )
        self.thread.start()

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def cancel(self, wait: float = 30.0) -> None:
        if not self.running():
            return
        self.cancelled.set()
        if self._spark is not None:  # a copy on the driver never started Spark
            with contextlib.suppress(Exception):  # already stopped
                self._spark.sparkContext.cancelJobGroup(self._job_group)
        assert self.thread is not None
        self.thread.join(timeout=wait)

    def _session(self):
        """The worker's Spark session, the copy's job group set on it."""
        self._spark = self.spark_factory()
        self._spark.sparkContext.setJobGroup(self._job_group, "pgferry copy", True)
        return self._spark

    def _run(self) -> None:
        try:
            self._copy()
        except Exception as exc:  # noqa: BLE001 - reported by the loop, retried later
            from pgferry.daemon import exc_message

            if self.cancelled.is_set():
                log.info("copy of %s stopped", ", ".join(self.group.tables))
                return
            self.error = exc_message(exc)
            log.error("copy of %s failed: %s", ", ".join(self.group.tables), self.error)

    def _copy(self) -> None:
        from pgferry.pipeline.copy import CopyTask, copy_tables

        names = list(self.group.tables)
        with (
            connect(self.local_dsn, autocommit=True, application_name="pgferry-copy") as local,
            connect(self.provider_dsn, autocommit=True, application_name="pgferry-copy") as prov,
        ):
            if not _lock_group(local, self.queue, self.group.group_id):
                log.info("Copy of %s runs elsewhere, not starting it", ", ".join(names))
                return
            waiting = provider_not_ready(prov, self.queue, names)
            if waiting:
                self.waiting = True
                log.info("Table %s not OK on provider, waiting", ", ".join(waiting))
                return
            # L0: made before the copy's snapshot, so every event after it is kept for us.
            start_tick = queue_api.last_tick(prov, self.queue)[0]
            if start_tick is None:
                raise TableError(f"queue {self.queue} has no tick on the provider yet")
            queue_api.register_at(prov, self.queue, self.consumer, start_tick)
            copy_id = uuid.uuid4().hex
            with local.transaction():
                _set(local, self.queue, names, "in-copy", consumer=self.consumer,
                     tick=start_tick, copy_id=copy_id)  # fmt: skip
            exprs = self.group.column_exprs or ((),) * len(names)
            excluded = self.group.excluded or ((),) * len(names)
            sets = self.group.settings or ((),) * len(names)
            only = self.group.only or (None,) * len(names)
            tasks = [
                CopyTask(source_table=s, dest_table=d, copy_condition=c, skip_truncate=k,
                         column_exprs=x, exclude_columns=i, settings=g, only_columns=o)
                for s, d, c, k, x, i, g, o in zip(names, self.group.dest_tables,
                                                  self.group.conditions, self.group.skip_truncate,
                                                  exprs, excluded, sets, only, strict=True)
            ]  # fmt: skip
            log.info("Copying %s", ", ".join(names))
            result = copy_tables(
                self._session,  # called only for tables too large for the driver
                self.provider_dsn,
                replica_dsn(self.local_dsn),
                tasks,
                max_parallel=self.group.max_parallel,
                copy_id=copy_id,
                on_totals=lambda totals: _record_totals(self.local_dsn, self.queue, totals),
                progress=False,
                cancelled=self.cancelled,
            )
            if self.cancelled.is_set():
                return  # the worker stops: the tables stay in-copy
            if not result.snapshot:
                raise TableError(f"copy of {', '.join(names)} returned no snapshot")
            with local.transaction():
                _set(local, self.queue, names, "catching-up", consumer=self.consumer,
                     tick=start_tick, copy_id=copy_id, snapshot=str(result.snapshot))  # fmt: skip
            tick_now(prov, self.queue)
            log.info(
                "Copied %s (%d rows), catching up", ", ".join(names), sum(result.rows.values())
            )


def _lock_group(conn: psycopg.Connection, queue: str, group_id: str) -> bool:
    """A session lock for the copy of one group (released when the thread's session ends)."""
    row = conn.execute(
        "select pg_try_advisory_lock(hashtext('pgferry-copy'), hashtext(%s))",
        (f"{queue}/{group_id}",),
    ).fetchone()
    return bool(row and row[0])


def _set(
    conn: psycopg.Connection,
    queue: str,
    tables: list[str],
    state: str,
    *,
    consumer: str,
    tick: int,
    copy_id: str,
    snapshot: str | None = None,
) -> None:
    conn.execute(
        """
        update ferry.table_info
           set merge_state = %s, copy_snapshot = %s::pg_snapshot, copy_consumer = %s,
               catchup_tick = %s, copy_id = %s,
               copy_started = case when %s = 'in-copy' then now() else copy_started end,
               copy_total = case when %s = 'in-copy' then null else copy_total end,
               copy_error = null
         where queue_name = %s and table_name = any(%s)
        """,
        (state, snapshot, consumer, tick, copy_id, state, state, queue, tables),
    )


def _record_totals(local_dsn: str, queue: str, totals: dict[str, int | None]) -> None:
    """The source tables' estimated rows, for the progress shown by tables / status."""
    with connect(local_dsn, autocommit=True) as conn:
        for dest, total in totals.items():
            conn.execute(
                """
                update ferry.table_info set copy_total = %s
                 where queue_name = %s and coalesce(dest_table, table_name) = %s
                """,
                (total, queue, dest),
            )


# --- catching up, in the loop -------------------------------------------------------------


def record_catchup(conn: psycopg.Connection, queue: str, group: CatchUp, tick: int) -> None:
    """Record ``tick`` as the group's position, in the transaction that applied its batch;
    refuse when the position moved meanwhile (another applier)."""
    rows = conn.execute(
        """
        update ferry.table_info set catchup_tick = %s
         where queue_name = %s and copy_consumer = %s and merge_state = 'catching-up'
           and catchup_tick = %s
        """,
        (tick, queue, group.consumer, group.tick),
    ).rowcount
    if rows != len(group.tables):
        raise PgferryError(
            f"copy position of {', '.join(group.tables)} moved while applying: batch discarded"
        )


def join_main(conn: psycopg.Connection, queue: str, group: CatchUp) -> None:
    """The group has reached the main stream's tick: the main stream takes it over."""
    conn.execute(
        """
        update ferry.table_info
           set merge_state = 'ok', copy_consumer = null, catchup_tick = null
         where queue_name = %s and copy_consumer = %s and merge_state = 'catching-up'
        """,
        (queue, group.consumer),
    )


def drop_consumer(provider: psycopg.Connection, queue: str, consumer: str) -> None:
    """Unregister a group's consumer on the provider (it holds events back from rotation)."""
    with contextlib.suppress(QueueError, psycopg.Error), provider.transaction():
        queue_api.unregister_consumer(provider, queue, consumer)


def forget_stale_consumers(
    local: psycopg.Connection, provider: psycopg.Connection, queue: str, main_consumer: str
) -> list[str]:
    """Group consumers on the provider that no local table refers to any more (the table
    was removed or resynced meanwhile): unregistered, so they hold nothing back."""
    used = {
        r[0]
        for r in local.execute(
            "select copy_consumer from ferry.table_info where queue_name = %s"
            " and copy_consumer is not null",
            (queue,),
        ).fetchall()
    }
    local.rollback()
    prefix = f"{main_consumer}.copy."
    stale = [c for c in queue_api.consumers(provider, queue) if c.startswith(prefix)]
    stale = [c for c in stale if c not in used]
    for consumer in stale:
        drop_consumer(provider, queue, consumer)
    return stale


def tick_now(provider: psycopg.Connection, queue: str) -> None:
    """A tick on the provider's queue after the copy: the hand-over needs no idle tick.

    The tick is made here when the provider ticks its queue itself: waiting for the
    ticker's next round would add up to ``ticker_period``.  The queue row lock orders it
    with the ticker's own ticks.  Otherwise (a branch mirrors its provider's ticks, a paused
    ticker, no right to tick) the forced tick comes with the next tick the queue gets.
    """
    for step in (queue_api.force_tick, queue_api.tick_if_own_ticker):
        with contextlib.suppress(psycopg.Error), provider.transaction():
            step(provider, queue)


def replica_dsn(dsn: str) -> str:
    """``dsn`` whose sessions run with session_replication_role = replica.

    The copy's own TRUNCATE and COPY must pass the subscriber's deny-write triggers.
    """
    params = conninfo.conninfo_to_dict(dsn)
    opts = str(params.get("options") or "")
    params["options"] = f"{opts} -c session_replication_role=replica".strip()
    return conninfo.make_conninfo(**params)


def clear_snapshots(conn: psycopg.Connection, queue: str, tick_snapshot: str | None) -> list[str]:
    """Tables whose copy snapshot lies wholly before ``tick_snapshot`` need no filter any
    more: no event visible in it can come in a later batch."""
    if tick_snapshot is None:
        return []
    rows = conn.execute(
        """
        update ferry.table_info set copy_snapshot = null
         where queue_name = %s and local and merge_state = 'ok' and copy_snapshot is not null
           and pg_snapshot_xmax(copy_snapshot) <= pg_snapshot_xmin(%s::pg_snapshot)
        returning table_name
        """,
        (queue, tick_snapshot),
    ).fetchall()
    return [r[0] for r in rows]
