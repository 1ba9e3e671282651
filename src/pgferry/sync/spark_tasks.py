"""Spark jobs of compare and repair in the DataFrame API, the part Spark Connect carries.

A job here is "run this Python function once per item, each in its own task, and bring the
results back": the item list travels inside the function (pickled with it), and the tasks
are the partitions of ``spark.range(n)``, so every item is one task whether the session is
a classic one (local or a cluster) or a Spark Connect client.  Results come back pickled in
a binary column; they are small (per-bucket sums).

Everything here runs its function on the executors; the helpers for job labels and
parallelism answer on the driver without a SparkContext when there is none.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from pgferry.pipeline.spark_connect import is_connect_session

if TYPE_CHECKING:  # PySpark and Arrow: loaded where a job runs
    import pyarrow as pa
    from pyspark.sql import SparkSession

    # The session compare, repair and diff are handed: a SparkSession, or a callable that
    # returns one, called only when a job needs Spark (the driver does the rest).
    Spark = SparkSession | Callable[[], SparkSession]

# Tasks a Spark Connect job is cut into when the server's parallelism is not known.
CONNECT_PARALLELISM = 8


def run_each(session: SparkSession, items: Sequence[Any], func: Callable[[Any], Any]) -> list[Any]:
    """``[func(item) for item in items]``, one Spark task per item, in the items' order."""
    if not items:
        return []
    frozen = tuple(items)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        schema = pa.schema([("no", pa.int64()), ("out", pa.binary())])
        for batch in batches:
            nos = batch.column("id").to_pylist()
            outs = [pickle.dumps(func(frozen[no])) for no in nos]
            yield pa.RecordBatch.from_pydict({"no": nos, "out": outs}, schema=schema)

    frame = session.range(0, len(frozen), 1, len(frozen)).mapInArrow(task, "no long, out binary")
    rows = frame.collect()
    results: list[Any] = [None] * len(frozen)
    for row in rows:
        results[row["no"]] = pickle.loads(row["out"])
    return results


def functions(session: SparkSession) -> ModuleType:
    """``pyspark.sql.functions`` for ``session``: a Connect client needs the Connect module
    (the classic one asks for a SparkContext, and PySpark picks by a process-wide switch
    that would turn a classic session in the same process into a client)."""
    if is_connect_session(session):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions as classic_functions

    return classic_functions


def describe_job(session: SparkSession, text: str) -> None:
    """Label the next jobs in Spark's UI (classic sessions; a Connect client has no
    SparkContext to label them with)."""
    if not is_connect_session(session):
        session.sparkContext.setJobDescription(text)


def parallelism(session: SparkSession) -> int:
    """Task slots the session offers: Spark's default parallelism, or for a Spark Connect
    client the server's ``spark.default.parallelism`` when it is set."""
    if not is_connect_session(session):
        return int(session.sparkContext.defaultParallelism)
    try:
        # None when not set: int() raises, as for a value that is no number.
        return max(1, int(cast(str, session.conf.get("spark.default.parallelism"))))
    except Exception:  # noqa: BLE001 - not set on the server: a fixed cut
        return CONNECT_PARALLELISM
