"""The worker's Spark session, and replay's read path through Spark tasks.

The session's life.  Spark costs a caught-up worker some 400 MB (the JVM and Spark's Python
workers) and, on a shared cluster, cores that the node's own ``compare`` then waits for, so
it runs only while there is work for it:

* an initial copy starts it at once (:meth:`WorkerSpark.get`, from the copy's thread);
* a batch never starts it (a JVM starting during a catch-up takes the CPU the catch-up
  needs); a batch large enough for Spark that found it down is remembered, and once the
  worker is caught up it starts the session in the background (:meth:`WorkerSpark.ready`)
  with a warm-up job, for the next large batch (``spark_warm``);
* the loop calls :meth:`WorkerSpark.idle` on every pass: a session unused for
  ``spark_idle_timeout`` seconds (no job, no ``get``, no Spark read) is stopped with its JVM
  (:func:`pgferry.pipeline.spark.stop_spark`), in a thread of its own.

Spark that cannot be used (master unreachable, no executor within ``spark_wait``, Spark
Connect) is one warning line; replay goes on on the driver and the start is tried again
after ``spark_idle_timeout``.  A copy that needs it fails with that line and is retried as
any failed copy is.  A session that ran before this worker (another user's in the same
process) is used but never stopped.

Where the read path runs:

* On the driver (the worker process): everything in this module except the task function.
  :meth:`WorkerSpark.readers` gives a :class:`~.part_reads.ReaderPool` whose reader
  threads each submit a one-task job per table part and collect its COPY data; the driver
  loads it into the stage table (:mod:`pgferry.apply.replay.one_connection`).
* On executors: the task function made by :func:`_read_task`; it opens a provider
  connection of its own and runs :func:`pgferry.apply.replay.read.read_part`.
* Picklable: the task function and what it holds, which is the provider's connection
  string (a ``str``) and a reference to :mod:`pgferry.apply.replay.read`, imported again on the
  executor (so ``read_part`` must stay a module-level function there).  Nothing of the
  driver (connections, the session, threads) may be reached from it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pgferry import settings
from pgferry.apply.replay import read
from pgferry.apply.replay.part_reads import ReaderPool
from pgferry.apply.replay.read import ReplayError
from pgferry.config import Config
from pgferry.daemon import exc_message
from pgferry.pipeline.spark_errors import job_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Seconds an unused session stays up (spark_idle_timeout): a copy's job or a large batch
# that follows within a minute finds it up; a caught-up worker drops ~400 MB after it.
IDLE_TIMEOUT = settings.SPARK_IDLE_TIMEOUT.fixed
# Seconds the worker's exit waits for a background start of Spark.
START_JOIN = 15.0


def _read_task(provider_dsn: str) -> Callable[[tuple[str, bool]], list[bytes]]:
    """The function each Spark task runs on an executor (see the module docstring)."""

    def task(part: tuple[str, bool]) -> list[bytes]:
        return read.read_part(provider_dsn, part[0], part[1])

    return task


class WorkerSpark:
    """The Spark session of one worker: started for work that needs it, stopped when
    unused (see the module docstring)."""

    def __init__(self, config: Config, verbose: int = 0) -> None:
        self.config = config  # replaced on reload; read when the session starts
        self.verbose = verbose
        self._session: SparkSession | None = None
        self._owned = False  # a session that was running before us is not ours to stop
        self._starting: threading.Thread | None = None
        self._stopping: threading.Thread | None = None
        self._lock = threading.Lock()  # copy threads, readers and the loop may ask at once
        self._used_at = 0.0  # monotonic time of the last use
        self._reads = 0  # Spark reads of a batch under way
        self._wanted_at: float | None = None  # a large batch found the session down
        self._failed_at: float | None = None  # the last start failed: wait before the next
        if config.get(settings.SPARK_REMOTE):
            # Said once: the setting is the node's commands', not this worker's.
            log.info(
                "spark_remote serves compare, repair and diff; this worker's copies and large"
                " batches run on spark_master (%s)",
                config.get(settings.SPARK_MASTER),
            )

    @property
    def idle_timeout(self) -> float:
        return self.config.get(settings.SPARK_IDLE_TIMEOUT)

    # --- starting ------------------------------------------------------------------------
    def get(self) -> SparkSession:
        """The session, started now if it is not up; raises
        :class:`~pgferry.errors.SparkUnavailable` when Spark cannot be used."""
        # A start or stop under way in another thread holds the lock: this waits for it.
        with self._lock:
            if self._session is None:
                self._start()
            assert self._session is not None
            self._used_at = time.monotonic()
            return self._session

    def running(self) -> bool:
        """True when the session runs; unlike :meth:`ready`, asking changes nothing."""
        session = self._session
        return session is not None and self._stopping is None and self._usable(session)

    def ready(self, start: bool = True) -> bool:
        """True when the session runs.

        ``start=False`` is a large batch asking: when the session is down it is remembered,
        so that the worker starts it once caught up.  ``start=True`` (the worker is caught
        up) starts it in the background if a large batch asked within
        ``spark_idle_timeout`` and no start failed within it.  Starting Spark takes from
        seconds to half a minute on a busy machine: replay never waits for it.
        """
        now = time.monotonic()
        session = self._session
        if self.running():
            return True
        if not start:
            self._wanted_at = now
            return False
        if session is not None:
            return False  # up without an executor, or being stopped
        if self._starting is not None and not self._starting.is_alive():
            self._starting = None
        recent = self._wanted_at is not None and now - self._wanted_at < self._keep_for()
        failed = self._failed_at is not None and now - self._failed_at < self._keep_for()
        if recent and not failed and self._starting is None and self._stopping is None:
            self._starting = threading.Thread(
                target=self._start_quietly, name="spark-start", daemon=True
            )
            self._starting.start()
        return False

    def _usable(self, session: SparkSession) -> bool:
        """A session is usable while its context runs and, on a cluster, holds an
        executor: a batch must not wait for cores (a lost cluster shows up here too)."""
        from pgferry.pipeline import spark_cluster

        try:
            context = session.sparkContext._jsc.sc()
            if context.isStopped():
                return False
            return spark_cluster.is_local(context.master()) or spark_cluster.executors(session) > 0
        except Exception:  # noqa: BLE001 - a broken gateway: the driver path goes on
            return False

    def _keep_for(self) -> float:
        timeout = self.idle_timeout
        return timeout if timeout > 0 else IDLE_TIMEOUT

    def _start(self) -> None:
        from pyspark.sql import SparkSession

        from pgferry.errors import SparkUnavailable
        from pgferry.pipeline.spark import SparkOptions, spark_for

        owned = SparkSession.getActiveSession() is None
        options = SparkOptions.from_values(
            self.config.values, f"pgferry-{self.config.job_name}", self.verbose > 1
        )
        try:
            session = spark_for(options)
        except SparkUnavailable:
            self._failed_at = time.monotonic()
            raise
        self._owned, self._session = owned, session
        self._used_at = time.monotonic()
        self._failed_at = None

    def _start_quietly(self) -> None:
        try:
            with self._lock:
                if self._session is None:
                    self._start()
            # One tiny task per slot starts the Python workers, the slow part of a first job.
            assert self._session is not None
            with self._in_use():
                slots = max(1, self._session.sparkContext.defaultParallelism)
                self._session.sparkContext.parallelize(range(slots), slots).count()
            log.debug("Spark warm-up done")
        except Exception as exc:  # noqa: BLE001 - the driver path goes on; logged once
            self._failed_at = time.monotonic()
            log.warning("Spark did not start, replaying on the driver: %s", exc_message(exc))

    # --- stopping ------------------------------------------------------------------------
    def idle(self) -> None:
        """Called by the loop on every pass: stop a session unused for
        ``spark_idle_timeout`` seconds (0: keep it until the worker stops)."""
        session, timeout = self._session, self.idle_timeout
        if session is None or not self._owned or timeout <= 0 or self._stopping is not None:
            return
        now = time.monotonic()
        if self._reads or (self._starting is not None and self._starting.is_alive()):
            self._used_at = now
            return
        if now - self._used_at < timeout:
            return
        try:
            busy = bool(session.sparkContext.statusTracker().getActiveJobsIds())
        except Exception:  # noqa: BLE001 - a context Spark stopped itself: stop the rest
            busy = False
        if busy:
            self._used_at = now  # a copy's job runs
            return
        log.info("Spark unused for %g s: stopping it", timeout)
        self._stopping = threading.Thread(target=self._stop_now, name="spark-stop", daemon=True)
        self._stopping.start()

    def _stop_now(self) -> None:
        from pgferry.pipeline.spark import stop_spark

        try:
            with self._lock:
                # Used again since idle() decided (a copy's get, a read): keep it.
                if self._reads or time.monotonic() - self._used_at < self.idle_timeout:
                    return
                session, self._session = self._session, None
                if session is not None:
                    stop_spark(session)
        finally:
            self._stopping = None

    def stop(self) -> None:
        """Wait for a start under way (a while), then stop the session if this worker
        started it."""
        if self._starting is not None:
            # A start waiting for a busy cluster's cores (spark_wait) must not hold the
            # worker's exit that long; a JVM left starting exits with this process.
            self._starting.join(timeout=START_JOIN)
        if self._stopping is not None:
            self._stopping.join()
        if self._session is not None and self._owned:
            from pgferry.pipeline.spark import stop_spark

            with contextlib.suppress(Exception):  # best effort at exit
                stop_spark(self._session)
        self._session = None

    # --- replay's reads ------------------------------------------------------------------
    @contextlib.contextmanager
    def _in_use(self) -> Iterator[None]:
        with self._lock:
            self._reads += 1
        try:
            yield
        finally:
            with self._lock:
                self._reads -= 1
                self._used_at = time.monotonic()

    def readers(self, batch_id: int, provider_dsn: str, parts: int) -> ReaderPool:
        """Readers whose every query is one Spark task (a job each, submitted by as many
        threads as Spark has slots, or ``parts``, so reading stays ahead of the apply)."""
        sc = self.get().sparkContext
        task = _read_task(provider_dsn)

        def read_remote(query: str, binary: bool) -> list[bytes]:
            try:
                with self._in_use():
                    sc.setJobDescription(f"pgferry replay batch {batch_id}")
                    return sc.parallelize([(query, binary)], 1).map(task).collect()[0]
            except Exception as exc:  # noqa: BLE001 - Py4J wraps executor failures
                raise ReplayError(f"batch {batch_id}: {job_error(exc)}") from None

        slots = parts or sc.defaultParallelism
        return ReaderPool(provider_dsn, slots, remote=read_remote)
