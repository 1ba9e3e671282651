"""Progress reporting: plain log lines off a terminal, a rich display on one."""

from __future__ import annotations

import logging
import time

import pytest

from pgferry.pipeline import progress as progress_mod
from pgferry.pipeline.progress import TableProgress
from pgferry.polling import wait_until

pytestmark = pytest.mark.pure


def test_plain_log_lines(monkeypatch, caplog) -> None:
    monkeypatch.setattr(progress_mod, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(progress_mod, "LOG_EVERY_SECONDS", 0.02)
    done = {"rows": 0}

    def poll() -> dict[str, int]:
        done["rows"] += 10
        return {"public.t": done["rows"]}

    with (
        caplog.at_level(logging.INFO, logger="pgferry.pipeline.progress"),
        TableProgress("copy", {"public.t": 1_000_000}, poll, enabled=False),
    ):
        wait_until(lambda: caplog.records, timeout=5, interval=0.01, what="a progress line")
    line = caplog.records[0].getMessage()
    assert line.startswith("copy public.t: ") and "/1000000 rows" in line and "rows/s" in line
    assert "ETA" in line


def test_rich_display_runs(monkeypatch, capsys) -> None:
    monkeypatch.setattr(progress_mod, "POLL_SECONDS", 0.01)
    with TableProgress("copy", {"a": 10, "b": None}, lambda: {"a": 5, "b": 7}, enabled=True):
        time.sleep(0.05)
    assert "copy a" in capsys.readouterr().err
