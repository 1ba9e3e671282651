"""The one place that creates the SparkSession.

``spark_master`` (default ``local[*]``) and every ``spark.*`` key of the config section are
passed to the builder; nothing is downloaded at run time (the PostgreSQL JDBC driver, when the
system package is installed, is put on the classpath for Spark's JDBC source).  Spark's own
log and console progress bars are hidden unless verbose.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping

from pyspark.sql import SparkSession

from pgferry.db import mask_connstr

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
