"""``pgferry CONFIG -s`` without a command signals the daemon of that config, as before."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from pgferry.cli.main import main


def _sleeper(pidfile: Path) -> subprocess.Popen:
    # SIGINT's default action from the start: a suite run as a background job of a shell
    # without job control inherits SIGINT ignored, and the sleeper would outlive it.
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    pidfile.write_text(f"{proc.pid}\n")
    return proc


def test_stop_without_command_for_node_and_ticker_configs(tmp_path: Path, capsys) -> None:
    node_pid, ticker_pid = tmp_path / "node.pid", tmp_path / "pgqd.pid"
    (tmp_path / "node.ini").write_text(f"[londiste3]\ndb = dbname=x\npidfile = {node_pid}\n")
    (tmp_path / "pgqd.ini").write_text(f"[pgqd]\npidfile = {ticker_pid}\n")
    node, ticker = _sleeper(node_pid), _sleeper(ticker_pid)
    try:
        assert main([str(tmp_path / "node.ini"), "-s"]) == 0
        assert node.wait(timeout=10) != 0  # SIGINT ends the sleeper
        assert main(["-k", str(tmp_path / "pgqd.ini")]) == 0
        assert ticker.wait(timeout=10) != 0
        assert "SIGTERM" in capsys.readouterr().out
        assert main([str(tmp_path / "node.ini"), "-s"]) == 0
        assert "process not running" in capsys.readouterr().out
    finally:
        for proc in (node, ticker):
            proc.kill()
