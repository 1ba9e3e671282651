"""The change feed: a queue's row events as a Spark structured stream.

``pgferry.stream.register(spark)`` once per session, then::

    spark.readStream.format("pgferry")
        .option("provider", "host=... dbname=...")   # a root or branch
        .option("queue", "replika")
        .option("consumer", "lake_feed")              # registered on first use
        .option("tables", "public.orders,public.items")  # default: every table
        .option("snapshot", "true")        # on a root: a new query reads the rows first
        .load()

Rows: ``tick_id``, ``ev_id``, ``table``, ``op`` (I, U, D, T, S), ``data``, ``key``,
``committed_at``, ``ev_time``, ``old_data`` (``docs/changefeed.md``).  The source is
:mod:`pgferry.stream.source`; its PostgreSQL side, free of PySpark, is
:mod:`pgferry.stream.feed` over :mod:`pgferry.queue.ranges`.

A lake leaf's tables are read by ``spark.read.format("pgferry-lake")``, the batch source of
:mod:`pgferry.stream.lake_source` (``docs/lakehouse.md``).
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

from pgferry.db import connection
from pgferry.queue import api as queue_api

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``format("pgferry")`` known to ``spark`` (a classic or Spark Connect session).

    The source's Python workers (the driver's planner, the executors' reads) run the
    interpreter PySpark names when the source is registered: ``PYSPARK_PYTHON``, else
    ``python3`` from PATH.  A job started with a virtualenv's interpreter without
    activating it would have them run a ``python3`` that cannot import pgferry; see
    :func:`worker_python` for the one chosen instead."""
    from pgferry.stream.source import PgferrySource

    register_source(spark, PgferrySource)


def register_source(spark: SparkSession, source: type) -> None:
    """Register the Python data source ``source`` with ``spark``, its workers running the
    interpreter :func:`worker_python` chooses (the change feed's, the lake reader's)."""
    context = getattr(spark, "_sc", None)  # None on Spark Connect: the server decides
    if context is None or not hasattr(context, "pythonExec"):
        spark.dataSource.register(source)
        return
    conf = context.getConf()
    chosen = worker_python(
        dict(os.environ), conf.get("spark.pyspark.python"), context.master, context.pythonExec
    )
    if chosen is None:
        spark.dataSource.register(source)
        return
    # The source's function carries the interpreter it was registered with; the session's
    # other Python functions keep theirs.
    before = context.pythonExec
    context.pythonExec = chosen
    try:
        spark.dataSource.register(source)
    finally:
        context.pythonExec = before


def worker_python(
    env: dict[str, str], conf_python: str | None, master: str, current: str
) -> str | None:
    """The interpreter the source's workers should run instead of ``current`` (what
    PySpark would use), or None to keep it.  ``PYSPARK_PYTHON`` is PySpark's own choice
    and kept.  ``spark.pyspark.python``, which PySpark's Python side reads only when
    ``spark-submit`` starts the program, is used as set.  Otherwise, on a local master
    (workers on this machine), the driver's own interpreter when ``python3`` on PATH is
    another one: the driver imports pgferry, so its interpreter can."""
    if env.get("PYSPARK_PYTHON"):
        return None
    if conf_python:
        return None if conf_python == current else conf_python
    if not master.startswith("local"):
        return None  # the executors' machines: documented, the driver cannot know them
    found = shutil.which("python3", path=env.get("PATH", os.defpath))
    if found is not None and os.path.abspath(found) == os.path.abspath(sys.executable):
        return None
    return sys.executable


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
