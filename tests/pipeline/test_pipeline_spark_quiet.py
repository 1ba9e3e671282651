"""Starting Spark prints nothing of the JVM's own on the operator's stderr."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from pgferry.pipeline.spark import get_spark
spark = get_spark(master="local[1]")
print("count", spark.sparkContext.parallelize([1, 2, 3]).count())
print("still mine", file=sys.stderr)
spark.stop()
"""


def test_jvm_start_is_quiet() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "count 3" in done.stdout
    assert done.stderr.strip() == "still mine"
