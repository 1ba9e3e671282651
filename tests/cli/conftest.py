"""Fixtures for node and registry tests: ini files and the CLI run in-process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from pgferry.cli.main import main


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def write_ini(tmp_path: Path) -> Callable[..., Path]:
    """``write_ini(job, db, queue='replika', **settings)`` -> path of a [londiste3] ini."""

    def make(job: str, db: str, queue: str = "replika", **settings: str) -> Path:
        path = tmp_path / f"{job}.ini"
        lines = [
            "[londiste3]",
            f"job_name = {job}",
            f"db = {db}",
            f"queue_name = {queue}",
            f"logfile = {tmp_path}/log/%(job_name)s.log",
            f"pidfile = {tmp_path}/pid/%(job_name)s.pid",
        ]
        lines += [f"{k} = {v}" for k, v in settings.items()]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return make


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run ``pgferry ARGS`` in-process; returns exit code and captured output."""

    def run(*args: object) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
