"""The worker's Spark session, and replay's read path through Spark tasks.

The session's life: a worker that is caught up starts it in the background
(:meth:`WorkerSpark.ready`) and runs a warm-up job, so that the next large batch or initial
copy finds it up; a copy that needs it at once starts it in the foreground
(:meth:`WorkerSpark.get`).  A batch never starts it: a JVM starting during a catch-up takes
the CPU the catch-up needs.  :meth:`WorkerSpark.stop` stops it at shutdown, unless it ran
before this worker (another user's session in the same process is not ours to stop).

Where the read path runs:

* On the driver (the worker process): everything in this module except the task function.
  :meth:`WorkerSpark.readers` gives a :class:`~pgferry.apply.read.ReaderPool` whose reader
  threads each submit a one-task job per table part and collect its COPY data; the driver
  loads it into the stage table (:mod:`pgferry.apply.stage_apply`).
* On executors: the task function made by :func:`_read_task`; it opens a provider
  connection of its own and runs :func:`pgferry.apply.read.read_part`.
* Picklable: the task function and what it holds, which is the provider's connection
  string (a ``str``) and a reference to :mod:`pgferry.apply.read`, imported again on the
  executor (so ``read_part`` must stay a module-level function there).  Nothing of the
  driver (connections, the session, threads) may be reached from it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from pgferry.apply import read
from pgferry.apply.plan import ReplayError
from pgferry.config import Config
from pgferry.daemon import exc_message

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def _read_task(provider_dsn: str) -> Callable[[tuple[str, bool]], list[bytes]]:
    """The function each Spark task runs on an executor (see the module docstring)."""

    def task(part: tuple[str, bool]) -> list[bytes]:
        return read.read_part(provider_dsn, part[0], part[1])

    return task


class WorkerSpark:
    """The Spark session of one worker: started on demand or in the background, warmed up,
    stopped at shutdown if it is ours."""

    def __init__(self, config: Config, verbose: int = 0) -> None:
        self.config = config  # replaced on reload; read when the session starts
        self.verbose = verbose
        self._session: SparkSession | None = None
        self._owned = False  # a session that was running before us is not ours to stop
        self._starting: threading.Thread | None = None
        self._lock = threading.Lock()  # copy threads and the loop may ask at once

    def get(self) -> SparkSession:
        """The session, started now if it is not up (a root worker never starts one)."""
        with self._lock:
            if self._session is None:
                if self._starting is not None:
                    self._starting.join()
                    self._starting = None
                if self._session is None:
                    self._start()
            assert self._session is not None
            return self._session

    def ready(self, start: bool = True) -> bool:
        """True when the session runs; otherwise (with ``start``) start it in the background.

        Starting Spark takes from seconds to half a minute on a busy machine: replay never
        waits for it (the driver path handles the batch meanwhile).
        """
        if self._session is not None:
            return True
        if not start:
            return False
        if self._starting is None:
            self._starting = threading.Thread(
                target=self._start_quietly, name="spark-start", daemon=True
            )
            self._starting.start()
        elif not self._starting.is_alive():
            self._starting = None
        return self._session is not None

    def stop(self) -> None:
        """Wait for a start under way, then stop the session if this worker started it."""
        if self._starting is not None:
            self._starting.join()
        if self._session is not None and self._owned:
            with contextlib.suppress(Exception):  # best effort at exit
                self._session.stop()
        self._session = None

    def _start(self) -> None:
        from pyspark.sql import SparkSession

        from pgferry.pipeline.spark import get_spark

        owned = SparkSession.getActiveSession() is None
        session = get_spark(
            master=self.config.spark_master,
            app_name=f"pgferry-{self.config.job_name}",
            settings=self.config.spark_settings(),
            verbose=self.verbose > 1,
        )
        self._owned, self._session = owned, session

    def _start_quietly(self) -> None:
        try:
            self._start()
            # One tiny task per slot starts the Python workers, the slow part of a first job.
            assert self._session is not None
            slots = max(1, self._session.sparkContext.defaultParallelism)
            self._session.sparkContext.parallelize(range(slots), slots).count()
            log.debug("Spark warm-up done")
        except Exception as exc:  # noqa: BLE001 - the driver path goes on; logged once
            log.warning("Spark did not start, replaying on the driver: %s", exc_message(exc))

    def readers(self, batch_id: int, provider_dsn: str, parts: int) -> read.ReaderPool:
        """Readers whose every query is one Spark task (a job each, submitted by as many
        threads as Spark has slots, or ``parts``, so reading stays ahead of the apply)."""
        sc = self.get().sparkContext
        task = _read_task(provider_dsn)

        def read_remote(query: str, binary: bool) -> list[bytes]:
            try:
                sc.setJobDescription(f"pgferry replay batch {batch_id}")
                return sc.parallelize([(query, binary)], 1).map(task).collect()[0]
            except Exception as exc:  # noqa: BLE001 - Py4J wraps executor failures
                from pgferry.pipeline.spark import job_error  # slow to import: only here

                raise ReplayError(f"batch {batch_id}: {job_error(exc)}") from None

        slots = parts or sc.defaultParallelism
        return read.ReaderPool(provider_dsn, slots, remote=read_remote)
