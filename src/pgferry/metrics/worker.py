"""The replication worker's metrics: counts from the :class:`~pgferry.apply.worker.Worker`
object (its counters, a histogram its per-batch callback fills, its last look at the root's
ticker), positions, lag, table states and copy progress read from the node's database
while the scrape runs, and whether the worker of each of the node's subscribers counts as
down (:mod:`pgferry.node.worker_health`), read on the subscriber's database: a dead
worker reports nothing itself, so its provider's worker does.
``docs/metrics.md`` lists every metric.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psycopg
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pgferry import settings
from pgferry.config import Config
from pgferry.db import error_text
from pgferry.errors import PgferryError
from pgferry.metrics.server import APPLICATION_NAME, CONNECT_TIMEOUT, scrape_connection

if TYPE_CHECKING:
    from pgferry.apply.replay.one_connection import ApplyStats
    from pgferry.apply.worker import Worker
    from pgferry.queue.batches import Batch

log = logging.getLogger(__name__)

# Seconds; from a small batch applied in one round trip to a long catch-up batch.
BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# merge_state of ferry.table_info as the label ``state`` spells it (NULL: copy pending).
TABLE_STATES = ("pending", "in-copy", "catching-up", "ok")


@dataclass
class _Histogram:
    """Bucket counts of observed values; filled by the worker, read by scrapes."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        index = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[index] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


@dataclass
class NodeReading:
    """What one scrape read from the node's database."""

    node_name: str
    node_type: str
    last_tick_id: int | None = None
    lag_seconds: float | None = None
    paused: bool = False
    error: bool = False
    refused_ddl: int = 0  # captured DDL events replay refused to run (ferry.refused_event)
    tables: dict[str, str] = field(default_factory=dict)  # table -> state label
    copy_rows: dict[tuple[str, str], int] = field(default_factory=dict)  # (copy, table): rows
    subscribers_down: dict[str, bool] = field(default_factory=dict)  # subscriber: worker down


def read_node(
    conn: psycopg.Connection, queue: str, config: Config | None = None
) -> NodeReading | None:
    """Position, lag, health and table states of the local node of ``queue`` (None when
    this database is not a node of it); with ``config``, its subscribers' workers too
    (:func:`read_subscribers`)."""
    from pgferry.node import model
    from pgferry.queue import ticks as queue_ticks
    from pgferry.registry import entries
    from pgferry.registry import refused as registry_refused

    node = model.load_node(conn, queue)
    if node is None:
        return None
    reading = NodeReading(node.node_name, node.node_type)
    now_row = conn.execute("select now()").fetchone()
    assert now_row is not None
    now = now_row[0]
    state = model.local_state(conn, queue, node.worker_name)
    tick_time = None
    if state is not None:
        reading.last_tick_id, tick_time = state.last_tick_id, state.last_tick_time
        reading.paused, reading.error = state.paused, state.cur_error is not None
    if node.is_root:
        # The root's position is its queue's newest tick; its lag is the ticker's lag.
        reading.last_tick_id, tick_time = queue_ticks.last_tick(conn, queue)
    refused = registry_refused.refused(conn, queue)
    reading.refused_ddl = refused.count if refused else 0
    if tick_time is not None:
        reading.lag_seconds = max(0.0, (now - tick_time).total_seconds())
    names: dict[str, str] = {}  # destination -> the table's name in the queue (the label of both)
    for entry in entries.list_tables(conn, queue):
        reading.tables[entry.table_name] = entry.merge_state or "pending"
        names[entry.dest_name] = entry.table_name
    reading.copy_rows = {
        (copy_id, names.get(dest, dest)): rows for (copy_id, dest), rows in _copy_rows(conn).items()
    }
    if config is not None:
        reading.subscribers_down = read_subscribers(conn, queue, config)
    return reading


def read_subscribers(conn: psycopg.Connection, queue: str, config: Config) -> dict[str, bool]:
    """Whether the worker of each live subscriber of the node counts as down, read on the
    subscriber's database in parallel (the rule of :mod:`pgferry.node.worker_health`, with
    this node's ``exception_sleep``); a subscriber that cannot be read is left out."""
    from pgferry.node import connect, model, worker_health

    names = {name for name, _ in model.subscribers(conn, queue)}
    where = [
        (m.node_name, m.node_location)
        for m in model.members(conn, queue)
        if m.node_name in names and not m.dead
    ]
    if not where:
        return {}
    after = worker_health.down_after(config)

    def one(member: tuple[str, str]) -> tuple[str, bool | None]:
        name, location = member
        try:
            with connect.connect_remote(
                config,
                location,
                autocommit=True,
                application_name=APPLICATION_NAME,
                connect_timeout=CONNECT_TIMEOUT,
            ) as remote:
                reading = worker_health.read(remote, queue)
        except (PgferryError, psycopg.Error) as exc:
            log.debug("metrics: cannot read subscriber %s: %s", name, exc)
            return name, None
        return name, None if reading is None else reading.down(after)

    with ThreadPoolExecutor(max_workers=min(8, len(where))) as pool:
        found = list(pool.map(one, where))
    return {name: down for name, down in found if down is not None}


def _copy_rows(conn: psycopg.Connection) -> dict[tuple[str, str], int]:
    """Rows recorded so far by the copies running into this database (the copy's own
    bookkeeping, ``ferry_copy.range_done``; a finished copy's rows are removed from it)."""
    from pgferry.pipeline.copy.destination import rows_by_copy

    return rows_by_copy(conn)


class WorkerCollector(Collector):
    """The metrics of one :class:`~pgferry.apply.worker.Worker`; see ``docs/metrics.md``.

    Registered as a batch observer of the worker (the duration histogram); everything else
    is read when scraped.  ``read`` reads the node's database (default: :func:`read_node`
    on a fresh short-timeout connection to the worker's ``db``).
    """

    def __init__(
        self,
        worker: Worker,
        read: Callable[[Worker], NodeReading | None] | None = None,
    ) -> None:
        self.worker = worker
        self._read = read or _read_worker_node
        self._lock = threading.Lock()
        self._scrape_lock = threading.Lock()
        self._durations = _Histogram(BATCH_BUCKETS)
        # Until the database names the node: the ini's node_name, else the job name.
        self._node = worker.config.get(settings.NODE_NAME) or worker.config.job_name
        # Copy rows: per table, rows of copies no longer in the bookkeeping, and the
        # newest count seen of each copy still there.
        self._copied_before: dict[str, int] = {}
        self._copies: dict[tuple[str, str], int] = {}
        worker.batch_observers.append(self.observe_batch)

    def observe_batch(self, batch: Batch, stats: ApplyStats, seconds: float) -> None:
        with self._lock:
            self._durations.observe(seconds)

    def _node_reading(self) -> NodeReading | None:
        try:
            reading = self._read(self.worker)
        except Exception as exc:  # noqa: BLE001 - a scrape reports, it never fails the worker
            log.debug("metrics: cannot read the node database: %s", error_text(exc))
            return None
        if reading is not None:
            self._node = reading.node_name
        return reading

    def _copy_totals(self, seen: dict[tuple[str, str], int]) -> dict[str, int]:
        for key, rows in self._copies.items():
            if key not in seen:  # finished (or abandoned): keep what it had copied
                self._copied_before[key[1]] = self._copied_before.get(key[1], 0) + rows
        self._copies = {key: max(rows, self._copies.get(key, 0)) for key, rows in seen.items()}
        totals = dict(self._copied_before)
        for (_, table), rows in self._copies.items():
            totals[table] = totals.get(table, 0) + rows
        return totals

    def collect(self) -> Iterator[Metric]:
        with self._scrape_lock:  # one scrape at a time reads the database
            reading = self._node_reading()
            values = [self.worker.settings.queue, self._node]
            copies = self._copy_totals(reading.copy_rows) if reading is not None else None
        with self._lock:  # never held across a database read: the worker waits on it
            buckets, duration_sum = self._durations.buckets(), self._durations.total
        labels = ["queue", "node"]
        w = self.worker
        for name, doc, value in (
            (
                "pgferry_batches_total",
                "Batches applied since the worker started.",
                w.batches_applied,
            ),
            ("pgferry_spark_batches_total", "Batches applied through Spark.", w.spark_batches),
            (
                "pgferry_events_applied_total",
                "Row events applied (upserts and deletes after collapsing).",
                w.events_applied,
            ),
            ("pgferry_errors_total", "Failed worker loops (each retried).", w.errors_total),
        ):
            counter = CounterMetricFamily(name, doc, labels=labels)
            counter.add_metric(values, value)
            yield counter
        histogram = HistogramMetricFamily(
            "pgferry_batch_duration_seconds",
            "Time to apply one batch, from reading it to finishing it on the provider.",
            labels=labels,
        )
        histogram.add_metric(values, buckets, duration_sum)
        yield histogram
        up = GaugeMetricFamily(
            "pgferry_node_database_up",
            "1 when this scrape could read the node's database, else 0.",
            labels=labels,
        )
        up.add_metric(values, 1 if reading is not None else 0)
        yield up
        stopped = GaugeMetricFamily(
            "pgferry_root_ticker_stopped",
            "1 while the root's ticker counts as stopped (no tick for ticker_stopped_after"
            " seconds while events wait), else 0; only on the root's worker and on workers"
            " reading from the root.",
            labels=labels,
        )
        stalled = w.ticker_watch.stalled  # the worker's last look (None: not watched)
        if stalled is not None:
            stopped.add_metric(values, 1 if stalled else 0)
        yield stopped
        if reading is None:
            return
        yield from self._node_metrics(reading, labels, values)
        copied = CounterMetricFamily(
            "pgferry_copy_rows_total",
            "Rows copied into the table by initial copies seen by scrapes.",
            labels=[*labels, "table"],
        )
        for table, rows in sorted((copies or {}).items()):
            copied.add_metric([*values, table], rows)
        yield copied

    @staticmethod
    def _node_metrics(
        reading: NodeReading, labels: list[str], values: list[str]
    ) -> Iterable[Metric]:
        lag = GaugeMetricFamily(
            "pgferry_consumer_lag_seconds",
            "Age of the newest tick applied on this node (root: of its queue's newest tick).",
            labels=labels,
        )
        if reading.lag_seconds is not None:
            lag.add_metric(values, reading.lag_seconds)
        yield lag
        tick = GaugeMetricFamily(
            "pgferry_last_tick_id", "Newest tick applied on this node.", labels=labels
        )
        if reading.last_tick_id is not None:
            tick.add_metric(values, reading.last_tick_id)
        yield tick
        for name, doc, flag in (
            ("pgferry_node_paused", "1 while the node's worker is paused.", reading.paused),
            ("pgferry_node_error", "1 while the node has an error recorded.", reading.error),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            gauge.add_metric(values, 1 if flag else 0)
            yield gauge
        refused = CounterMetricFamily(
            "pgferry_refused_ddl_total",
            "Captured DDL events this node refused to run and passed over.",
            labels=labels,
        )
        refused.add_metric(values, reading.refused_ddl)
        yield refused
        states = GaugeMetricFamily(
            "pgferry_table_state",
            "1 for the table's current replication state, 0 for the others.",
            labels=[*labels, "table", "state"],
        )
        for table, current in sorted(reading.tables.items()):
            for state in TABLE_STATES:
                states.add_metric([*values, table, state], 1 if state == current else 0)
        yield states
        down = GaugeMetricFamily(
            "pgferry_subscriber_worker_down",
            "1 while the worker of the subscriber counts as down (no heartbeat for"
            " exception_sleep + 10 s and no session holds the node's lock), else 0.",
            labels=[*labels, "subscriber"],
        )
        for name, flag in sorted(reading.subscribers_down.items()):
            down.add_metric([*values, name], 1 if flag else 0)
        yield down


def _read_worker_node(worker: Worker) -> NodeReading | None:
    with scrape_connection(worker.settings.local_dsn) as conn:
        return read_node(conn, worker.settings.queue, worker.config)


def watch_worker(registry: CollectorRegistry, worker: Worker) -> WorkerCollector:
    """Register the worker's metrics in ``registry``."""
    collector = WorkerCollector(worker)
    registry.register(collector)
    return collector
