"""The change feed: a queue's row events as a Spark structured stream.

``pgferry.stream.register(spark)`` once per session, then::

    spark.readStream.format("pgferry")
        .option("provider", "host=... dbname=...")   # a root or branch
        .option("queue", "replika")
        .option("consumer", "lake_feed")              # registered on first use
        .option("tables", "public.orders,public.items")  # default: every table
        .load()

Rows: ``tick_id``, ``ev_id``, ``table``, ``op`` (I, U, D, T), ``data``, ``key``,
``committed_at``, ``ev_time``, ``old_data`` (``docs/changefeed.md``).  The source is
:mod:`pgferry.stream.source`; its PostgreSQL side, free of PySpark, is
:mod:`pgferry.stream.feed` over :mod:`pgferry.queue.ranges`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgferry.db import connection
from pgferry.queue import api as queue_api

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``format("pgferry")`` known to ``spark`` (a classic or Spark Connect session)."""
    from pgferry.stream.source import PgferrySource

    spark.dataSource.register(PgferrySource)


def unregister(provider: str, queue: str, consumer: str) -> bool:
    """Drop a change feed's consumer from ``queue`` on ``provider`` (a feed given up for
    good: its consumer would keep the queue's events forever); False when there was none.
    A query started again afterwards registers it anew at the newest tick."""
    with connection(provider) as conn:
        if not queue_api.is_registered(conn, queue, consumer):
            return False
        queue_api.unregister_consumer(conn, queue, consumer)
    return True


_PREFIX = "pgferry change feed: "


def error_line(exc: BaseException) -> str | None:
    """The feed's own line in a failed query's exception (``StreamingQueryException`` or
    the error of ``load()``), or None when the failure is not the feed's: what a program
    shows its operator instead of Spark's whole text."""
    for line in str(exc).splitlines():
        at = line.find(_PREFIX)
        if at >= 0:
            return line[at:].strip()
    return None
