"""pgferry's command line as tests, the demo and benchmarks run it.

:func:`run_pgferry` starts ``python -m pgferry ARGS`` as a child process, as an operator
would; :func:`run_cli` calls the same entry point in this process and captures what it
prints (PySpark and the worker are imported only when a command needs them, either way).
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Result:
    """A command's exit code and what it printed."""

    code: int
    out: str
    err: str


def run_pgferry(
    *args: object, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``python -m pgferry ARGS`` in a child process, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "pgferry", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_cli(args: list[str]) -> Result:
    """``pgferry ARGS`` in this process, its output captured."""
    from pgferry.cli.main import main  # the command table: loaded only when a command runs

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return Result(code, out.getvalue(), err.getvalue())
