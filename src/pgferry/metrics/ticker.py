"""The ticker's metrics: counts from the :class:`~pgferry.queue.ticker.TickerService`
object (per database), and each ticked queue's pending events, newest tick and lag read
from its database while the scrape runs, several databases at once.  ``docs/metrics.md``
lists every metric.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import psycopg
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pgferry.db import error_text
from pgferry.errors import PgferryError
from pgferry.metrics.server import scrape_connection

if TYPE_CHECKING:
    from pgferry.queue.ticker import TickerService

log = logging.getLogger(__name__)

# Databases the ticker's scrape reads at once.
TICKER_SCRAPE_THREADS = 4


@dataclass
class QueueReading:
    """One queue of a ticked database, as a scrape read it."""

    database: str
    queue: str
    events_pending: int | None
    last_tick_id: int | None
    ticker_lag_seconds: float | None


def read_queues(conn: psycopg.Connection, database: str) -> list[QueueReading]:
    from pgferry.queue import api as queue_api

    return [
        QueueReading(
            database=database,
            queue=q["queue_name"],
            events_pending=q["ev_new"],
            last_tick_id=q["last_tick_id"],
            ticker_lag_seconds=_seconds(q["ticker_lag"]),
        )
        for q in queue_api.queue_info(conn)
    ]


def _seconds(interval: timedelta | None) -> float | None:
    return None if interval is None else interval.total_seconds()


class TickerCollector(Collector):
    """The metrics of one :class:`~pgferry.queue.ticker.TickerService`."""

    def __init__(self, service: TickerService) -> None:
        self.service = service

    def _read(self, database: str) -> list[QueueReading]:
        try:
            with scrape_connection(self.service.settings.connstr(database)) as conn:
                return read_queues(conn, database)
        except (PgferryError, psycopg.Error) as exc:
            log.debug("metrics: cannot read %s: %s", database, error_text(exc))
            return []

    def collect(self) -> Iterator[Metric]:
        # Databases without the queue schema are watched too: shown once they count.
        databases = [
            db
            for db in list(self.service.databases.values())
            if db.conn is not None
            or db.ticks_made
            or db.maint_operations
            or db.retry_moved
            or db.errors
        ]
        served = [db.name for db in databases if db.conn is not None]
        for name, doc, attr in (
            ("pgferry_ticks_total", "Ticks made (one per ticked queue).", "ticks_made"),
            (
                "pgferry_maint_operations_total",
                "Maintenance steps run (rotation, hooks).",
                "maint_operations",
            ),
            ("pgferry_retry_events_total", "Retry events moved back into queues.", "retry_moved"),
            ("pgferry_ticker_errors_total", "Failed rounds on a database.", "errors"),
        ):
            counter = CounterMetricFamily(name, doc, labels=["database"])
            for db in databases:
                counter.add_metric([db.name], getattr(db, attr))
            yield counter
        ticked = GaugeMetricFamily(
            "pgferry_ticker_databases", "Databases with a queue being ticked now."
        )
        ticked.add_metric([], len(served))
        yield ticked
        readings: list[QueueReading] = []
        if served:
            workers = min(TICKER_SCRAPE_THREADS, len(served))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for found in pool.map(self._read, served):
                    readings.extend(found)
        labels = ["database", "queue"]
        for name, doc, attr in (
            (
                "pgferry_queue_events_pending",
                "Events inserted after the queue's newest tick (waiting for the next one).",
                "events_pending",
            ),
            ("pgferry_queue_last_tick_id", "The queue's newest tick.", "last_tick_id"),
            (
                "pgferry_queue_ticker_lag_seconds",
                "Age of the queue's newest tick.",
                "ticker_lag_seconds",
            ),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            for reading in readings:
                value = getattr(reading, attr)
                if value is not None:
                    gauge.add_metric([reading.database, reading.queue], value)
            yield gauge


def watch_ticker(registry: CollectorRegistry, service: TickerService) -> TickerCollector:
    """Register the ticker's metrics in ``registry``."""
    collector = TickerCollector(service)
    registry.register(collector)
    return collector
