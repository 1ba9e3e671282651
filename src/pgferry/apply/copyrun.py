"""One group's initial copy, run by a thread beside the worker's loop.

The thread chooses where the copy reads from (the provider, or the node of ``--copy-node``
/ ``--find-copy-node``: :mod:`pgferry.node.copynode`), registers the group's own consumer
so that no event of its tables is lost, copies the tables under one exported snapshot and
leaves them ``catching-up`` for the loop (:mod:`.handover` has the rules, :mod:`.copies`
the catch-up).  Where the consumer is registered, and at which tick:

* from the provider: on the provider's queue at its newest tick, before the snapshot;
* from a node upstream of the provider: on that node's queue at its newest tick, before
  the snapshot (taken there);
* from a node beside: after the snapshot, on the provider's queue at the tick that node
  had applied in the snapshot.  Its data is exactly that tick's, so the group needs no
  snapshot filter at all.

A group that :mod:`pgferry.node.copymode` chooses to copy in chunks reads the provider in
key ranges, each in a short transaction of its own (:mod:`pgferry.pipeline.copy.chunked`):
its consumer is registered at the provider's newest tick before the first chunk, and its
catch-up applies every event after that tick, with no snapshot filter.  Such a copy left
``in-copy`` by a stopped worker goes on with its remaining chunks from the same tick.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from pgferry.pipeline.copy import CopyTask

from pgferry import settings
from pgferry.apply.handover import CopyGroup, tick_now
from pgferry.db import connect, replica_dsn
from pgferry.errors import TableError
from pgferry.handlers.api import Handler, HandlerContext
from pgferry.lake.spec import LakeSpec
from pgferry.node import copymode, copynode, merge, model
from pgferry.pipeline.snapshot import open_in_snapshot
from pgferry.queue import api as queue_api
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import copystate, entries

log = logging.getLogger(__name__)


@dataclass
class CopyRun:
    """One group's copy (see the module docstring).

    The thread opens connections of its own (the loop's are not thread-safe), holds a
    session lock on the group so that no other worker process copies it at the same time,
    and submits its Spark job under a job group of its own so that :meth:`cancel` can stop
    it when the worker stops.
    """

    group: CopyGroup
    node: model.NodeInfo
    local_dsn: str
    provider_dsn: str
    dsn_of: Callable[[str], str]  # a member's location -> connection string
    spark_factory: Callable[[], object]
    handlers: HandlerContext  # the worker's: the lake handler's settings
    # copy_snapshot_max in bytes (larger tables copy in chunks) and copy_chunk_rows
    snapshot_max: int = settings.COPY_SNAPSHOT_MAX.fixed
    chunk_rows: int = settings.COPY_CHUNK_ROWS.fixed
    thread: threading.Thread | None = None
    error: str | None = None
    waiting: bool = False  # the source does not hold the tables in state ok yet
    cancelled: threading.Event = field(default_factory=threading.Event)
    _job_group: str = field(default_factory=lambda: f"pgferry-copy-{uuid.uuid4().hex[:12]}")
    _seen_tick: int | None = None  # BESIDE: the source's tick in the copy's snapshot
    _spark: Any = None  # the session, once the copy asked for it

    @property
    def queue(self) -> str:
        return self.node.queue_name

    def consumer(self, source: copynode.CopySource | None = None) -> str:
        """The group's own consumer: on the provider, or on an upstream node's queue
        (named after this node there, where other nodes' consumers live)."""
        name = f"{self.node.consumer_name}.copy.{self.group.group_id}"
        if source is not None and source.mode == copynode.UPSTREAM:
            name += f"@{self.node.node_name}"
        return name

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

    def _session(self) -> Any:  # a SparkSession
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

    def _source(
        self, local: psycopg.Connection, prov: psycopg.Connection
    ) -> copynode.CopySource | None:
        """Where the copy reads from, or None when a table is not ok there yet."""
        names = list(self.group.tables)
        if self.group.copy_node is None:
            waiting = copystate.not_ok(prov, self.queue, names)
            source = copynode.CopySource(
                self.node.provider_node or "", self.provider_dsn, copynode.PROVIDER
            )
        else:
            with local.transaction():
                source = copynode.choose(self.dsn_of, local, self.node, names, self.group.copy_node)
            waiting = list(source.not_ready)
        if waiting:
            self.waiting = True
            where = "provider" if source.mode == copynode.PROVIDER else "copy node"
            log.info("Table %s not OK on %s %s, waiting", ", ".join(waiting), where,
                     source.node_name)  # fmt: skip
            return None
        return source

    def _copy(self) -> None:
        from pgferry.pipeline.copy import copy_tables

        names = list(self.group.tables)
        with (
            connect(self.local_dsn, autocommit=True, application_name="pgferry-copy") as local,
            connect(self.provider_dsn, autocommit=True, application_name="pgferry-copy") as prov,
        ):
            if not _lock_group(local, self.queue, self.group.group_id):
                log.info("Copy of %s runs elsewhere, not starting it", ", ".join(names))
                return
            truncate_held = self._merged_parts(local)
            if truncate_held is None:
                return
            source = self._source(local, prov)
            if source is None:
                return
            consumer = self.consumer(source)
            if source.mode == copynode.PROVIDER and self._chunked(local, prov):
                self._copy_chunked(local, prov, consumer, self._tasks(truncate_held))
                return
            copied_from = None if source.mode == copynode.PROVIDER else source.node_name
            catchup_node = source.node_name if source.mode == copynode.UPSTREAM else None
            start_tick = None
            if source.mode != copynode.BESIDE:
                # L0: made before the copy's snapshot, so every event after it is kept for
                # us, on the queue the group will read.
                with connect(source.dsn, autocommit=True) as src:
                    start_tick = _keep_events_after_last_tick(
                        src, self.queue, consumer, source.node_name
                    )
            copy_id = uuid.uuid4().hex
            with local.transaction():
                copystate.set_copy_state(
                    local, self.queue, names, "in-copy", consumer=consumer, tick=start_tick,
                    copy_id=copy_id, source=copied_from, catchup_node=catchup_node,
                )  # fmt: skip
            tasks = self._tasks(truncate_held)
            log.info("Copying %s from %s %s", ", ".join(names),
                     "provider" if copied_from is None else "node", source.node_name)  # fmt: skip
            lakes = _lake_specs(local, self.queue, names, self.handlers)
            if lakes:  # the rows go to lake tables (handler lake): one commit per table
                from pgferry.pipeline.lake_copy import copy_to_lake

                copy = functools.partial(copy_to_lake, specs=lakes)
            else:
                copy = functools.partial(
                    copy_tables,
                    copy_id=copy_id,
                    on_snapshot=None if copied_from is None else self._check_snapshot(source),
                    progress=False,
                )
            result = copy(
                self._session,  # called only for tables too large for the driver
                source.dsn,
                replica_dsn(self.local_dsn),
                tasks,
                max_parallel=self.group.max_parallel,
                on_totals=lambda totals: _record_totals(self.local_dsn, self.queue, totals),
                cancelled=self.cancelled,
            )
            if self.cancelled.is_set():
                return  # the worker stops: the tables stay in-copy
            if not result.snapshot:
                raise TableError(f"copy of {', '.join(names)} returned no snapshot")
            snapshot: str | None = str(result.snapshot)
            if source.mode == copynode.BESIDE:
                # The copy holds the source's data as of its tick: catch up from there on
                # the provider's queue, with nothing to filter.
                start_tick, snapshot = self._seen_tick, None
                assert start_tick is not None
                queue_api.register_at(prov, self.queue, consumer, start_tick)
                queue_api.rewind(prov, self.queue, consumer, start_tick)  # its events are there
            assert start_tick is not None
            with local.transaction():
                copystate.set_copy_state(
                    local, self.queue, names, "catching-up", consumer=consumer,
                    tick=start_tick, copy_id=copy_id, source=copied_from,
                    catchup_node=catchup_node, snapshot=snapshot,
                )  # fmt: skip
            if source.mode == copynode.UPSTREAM:
                with connect(source.dsn, autocommit=True) as src:
                    tick_now(src, self.queue)
            else:
                tick_now(prov, self.queue)
            log.info(
                "Copied %s (%d rows), catching up", ", ".join(names), sum(result.rows.values())
            )

    def _tasks(self, truncate_held: set[str]) -> list[CopyTask]:
        """The group's tables as the copy's tasks."""
        from pgferry.pipeline.copy import CopyTask

        names = list(self.group.tables)
        exprs = self.group.column_exprs or ((),) * len(names)
        excluded = self.group.excluded or ((),) * len(names)
        sets = self.group.settings or ((),) * len(names)
        only = self.group.only or (None,) * len(names)
        skips = [k or d in truncate_held
                 for k, d in zip(self.group.skip_truncate, self.group.dest_tables,
                                 strict=True)]  # fmt: skip
        tasks = [
            CopyTask(source_table=s, dest_table=d, copy_condition=c, skip_truncate=k,
                     column_exprs=x, exclude_columns=i, settings=g, only_columns=o)
            for s, d, c, k, x, i, g, o in zip(names, self.group.dest_tables,
                                              self.group.conditions, skips,
                                              exprs, excluded, sets, only, strict=True)
        ]  # fmt: skip
        return tasks

    def _chunked(self, local: psycopg.Connection, prov: psycopg.Connection) -> bool:
        """Whether the group copies in chunks (:mod:`pgferry.node.copymode`)."""
        with local.transaction():
            found = [entries.get_table(local, self.queue, n) for n in self.group.tables]
        attrs = [e.table_attrs if e else {} for e in found]
        return copymode.chunked(
            prov, local, self.group.tables, self.group.dest_tables, attrs, self.snapshot_max
        )

    def _copy_chunked(
        self,
        local: psycopg.Connection,
        prov: psycopg.Connection,
        consumer: str,
        tasks: list[CopyTask],
    ) -> None:
        """The group copied in chunks from the provider, or the rest of its chunks."""
        from pgferry.pipeline.copy.chunked import copy_chunked

        names = list(self.group.tables)
        with local.transaction():
            resumed = copystate.chunked_in_copy(local, self.queue, names)
        if resumed is not None and resumed[1] not in queue_api.consumers(prov, self.queue):
            resumed = None  # its consumer is gone: the events since its tick may be too
        if resumed is not None:
            copy_id, consumer, start_tick = resumed
            with local.transaction():
                copystate.set_copy_error(local, self.queue, names, None)  # running again
            log.info("Resuming the chunked copy of %s", ", ".join(names))
        else:
            # The tick before the first chunk: every event after it is replayed.
            start_tick = _keep_events_after_last_tick(prov, self.queue, consumer, "the provider")
            copy_id = uuid.uuid4().hex
            with local.transaction():
                copystate.set_copy_state(
                    local, self.queue, names, "in-copy", consumer=consumer, tick=start_tick,
                    copy_id=copy_id, source=None, catchup_node=None, mode="chunked",
                )  # fmt: skip
            log.info("Copying %s from provider in chunks", ", ".join(names))
        rows = copy_chunked(
            self.provider_dsn,
            replica_dsn(self.local_dsn),
            tasks,
            copy_id=copy_id,
            chunk_rows=self.chunk_rows,
            resume=resumed is not None,
            parallel=self.group.max_parallel or 2,
            on_totals=lambda totals: _record_totals(self.local_dsn, self.queue, totals),
            cancelled=self.cancelled,
        )
        with local.transaction():
            copystate.set_copy_state(
                local, self.queue, names, "catching-up", consumer=consumer, tick=start_tick,
                copy_id=copy_id, source=None, catchup_node=None, mode="chunked",
            )  # fmt: skip
        tick_now(prov, self.queue)
        log.info("Copied %s (%d rows in chunks), catching up", ", ".join(names),
                 sum(rows.values()))  # fmt: skip

    def _merged_parts(self, local: psycopg.Connection) -> set[str] | None:
        """For merged tables (:mod:`pgferry.node.merge`): lock them against the other
        parts' copies and return those another part holds rows of (not to be truncated);
        None when another part's copy runs now (we wait)."""
        dests = [d for d, m in zip(self.group.dest_tables, self.group.merged, strict=False) if m]
        if not dests:
            return set()
        if not merge.lock_destinations(local, dests):
            self.waiting = True
            log.info("Another part copies %s, waiting", ", ".join(dests))
            return None
        held = set(merge.others_hold(local, self.queue, dests))
        if held:
            log.info("Other parts hold rows of %s: copying without truncate", ", ".join(held))
        return held

    def _check_snapshot(self, source: copynode.CopySource) -> Callable[[str], None]:
        """What the copy's snapshot on another node must show: every table ok there (a
        resync there may have started meanwhile) and, for a node beside, its tick."""

        def check(snapshot_id: str) -> None:
            names = list(self.group.tables)
            with open_in_snapshot(source.dsn, snapshot_id) as conn:
                missing = copynode.not_ready(conn, self.queue, names)
                tick = copynode.last_tick_in_snapshot(conn, self.queue)
            if missing:
                raise TableError(
                    f"Table {', '.join(missing)} is no longer ok on copy node {source.node_name}"
                )
            if source.mode == copynode.BESIDE:
                if tick is None:
                    raise TableError(f"copy node {source.node_name} has applied no tick yet")
                self._seen_tick = tick

        return check


def _keep_events_after_last_tick(
    conn: psycopg.Connection, queue: str, consumer: str, where: str
) -> int:
    """Register the copy's consumer at the queue's last tick on ``conn`` and return that
    tick: every event after it is kept for the copy's catch-up."""
    start_tick = queue_ticks.last_tick(conn, queue)[0]
    if start_tick is None:
        raise TableError(f"queue {queue} has no tick on {where}")
    queue_api.register_at(conn, queue, consumer, start_tick)
    return start_tick


def _lake_specs(
    conn: psycopg.Connection, queue: str, names: list[str], context: HandlerContext
) -> list[LakeSpec] | None:
    """The lake tables of a group whose handler is ``lake`` (None for any other group)."""
    from pgferry.handlers import registry as handler_registry
    from pgferry.handlers.lake import Lake

    handlers: list[Handler] = []
    for name in names:
        entry = entries.get_table(conn, queue, name)
        handlers.append(handler_registry.from_attrs(entry.table_attrs if entry else {}, context))
    if not any(isinstance(h, Lake) for h in handlers):
        return None
    if not all(isinstance(h, Lake) for h in handlers):
        raise TableError(f"copy group of {', '.join(names)} mixes lake and other tables")
    return [h.spec() for h in handlers if isinstance(h, Lake)]  # all are, as checked


def _lock_group(conn: psycopg.Connection, queue: str, group_id: str) -> bool:
    """A session lock for the copy of one group (released when the thread's session ends)."""
    row = conn.execute(
        "select pg_try_advisory_lock(hashtext('pgferry-copy'), hashtext(%s))",
        (f"{queue}/{group_id}",),
    ).fetchone()
    return bool(row and row[0])


def _record_totals(local_dsn: str, queue: str, totals: dict[str, int | None]) -> None:
    """The source tables' estimated rows, for the progress shown by tables / status."""
    with connect(local_dsn, autocommit=True) as conn:
        copystate.set_copy_totals(conn, queue, totals)
