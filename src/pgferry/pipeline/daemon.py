"""Spark's Python worker daemon, with the pipeline's task code imported before it forks.

Nothing here runs on the driver.  Spark starts this module (``spark.python.daemon.module``,
set by :func:`.spark.get_spark`) once per executor and forks a Python worker from it for each
task slot.  The workers run the tasks: the copy's :mod:`.copy.task`, compare's and repair's
per-bucket functions, the replication worker's batch reads; each unpickles what the driver
sent it.  A freshly forked worker would import PySpark's worker, psycopg and the copy code
before running its first task: about 0.2 s, more on a busy machine, and again after every
quiet minute, since Spark ends idle workers.  Imported once here, every forked worker starts
with them.  Nothing imported here starts a thread (the daemon must not have any when it
forks), and nothing here is pickled.
"""

from __future__ import annotations

import contextlib

with contextlib.suppress(Exception):  # a worker imports whatever is missing itself
    import psycopg  # noqa: F401
    import pyspark.worker  # noqa: F401

    import pgferry.pipeline.copy.task  # noqa: F401

from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
