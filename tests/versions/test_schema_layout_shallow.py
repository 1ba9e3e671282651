"""On a shallow clone the upgrade proof of test_schema_layout.py, which reads an old release
of the SQL from git's history, is skipped with one line saying so instead of failing.

A ``git clone --depth 1`` of this repository is made in a temporary folder, this tree's
test file laid over it, and pytest collects it there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
LAYOUT = Path(__file__).with_name("test_schema_layout.py")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_shallow_clone_skips_the_upgrade_proof(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{REPOSITORY}", str(clone)],
        check=True,
        timeout=120,
    )
    shutil.copy(LAYOUT, clone / "tests" / "versions" / LAYOUT.name)
    env = {**os.environ, "PYTHONPATH": str(clone / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/versions/test_schema_layout.py"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    # 5: nothing ran (pytest's code for a run whose only module skipped); 2 is an error.
    assert proc.returncode == 5, proc.stdout + proc.stderr
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, proc.stdout
    assert "shallow clone (git fetch --unshallow)" in skipped[0]
    assert "Traceback" not in proc.stdout + proc.stderr
