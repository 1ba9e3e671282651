"""Settings are honest: unknown keys are named, refused ones stop the command, the log
file follows log_size / log_count, and -r makes a daemon write to a fresh log file."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from pgferry.cli.ini_template import template_for
from pgferry.config import load_config
from pgferry.errors import ConfigError
from pgferry.log import setup_logging
from pgferry.settings import PGQ_KEEP_LAG, QUEUE_NAME, REFUSED
from pgferry.testing.scenario import wait_until


def test_unknown_key_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "node.ini"
    path.write_text("[pgferry]\ndb = dbname=x\nqueue_name = q\nparalel_copies = 4\n")
    with caplog.at_level(logging.WARNING):
        load_config(path)
    assert "unknown setting 'paralel_copies' in [pgferry]" in caplog.text


def test_known_keys_pass_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Everything --ini prints is known, spark.* keys included.
    path = tmp_path / "node.ini"
    text = template_for(None).replace("#", "")
    lines = [ln for ln in text.splitlines() if "=" in ln and not ln.startswith(" ")]
    body = "\n".join(ln if not ln.rstrip().endswith("=") else ln + " x" for ln in lines)
    path.write_text("[pgferry]\n" + body.replace("(file name without .ini)", "n") + "\n")
    with caplog.at_level(logging.WARNING):
        load_config(path)
    assert "unknown setting" not in caplog.text


def test_refused_keys_are_named_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for key in REFUSED:
        path = tmp_path / f"{key}.ini"
        path.write_text(f"[londiste3]\ndb = dbname=x\nqueue_name = q\n{key} = select 1\n")
        with caplog.at_level(logging.WARNING):
            config = load_config(path)
        assert f"setting '{key}' is ignored" in caplog.text
        assert f"unknown setting '{key}'" not in caplog.text
        assert config.get(QUEUE_NAME) == "q"
        assert key not in template_for(None)


def test_time_spans(tmp_path: Path) -> None:
    from datetime import timedelta

    path = tmp_path / "n.ini"
    for raw, seconds in (("30", 30), ("1.5", 1.5), ("10s", 10), ("5 min", 300), ("2 hours", 7200)):
        path.write_text(f"[pgferry]\ndb = dbname=x\nqueue_name = q\npgq_keep_lag = {raw}\n")
        assert load_config(path).get(PGQ_KEEP_LAG) == timedelta(seconds=seconds)
    path.write_text("[pgferry]\ndb = dbname=x\nqueue_name = q\npgq_keep_lag = soon\n")
    with pytest.raises(ConfigError, match="'pgq_keep_lag' must be a time span"):
        load_config(path).get(PGQ_KEEP_LAG)


def test_failover_settings(tmp_path: Path) -> None:
    from datetime import timedelta

    from pgferry.apply.worker_settings import WorkerSettings

    path = tmp_path / "n.ini"
    path.write_text("[pgferry]\ndb = dbname=x\nqueue_name = q\n")
    found = WorkerSettings.from_config(load_config(path))
    assert (found.failover_reconcile, found.failover_history) == (True, timedelta(days=1))
    path.write_text(
        "[pgferry]\ndb = dbname=x\nqueue_name = q\nfailover_reconcile = Stop\n"
        "failover_history = 2 hours\n"
    )
    found = WorkerSettings.from_config(load_config(path))
    assert (found.failover_reconcile, found.failover_history) == (False, timedelta(hours=2))
    path.write_text("[pgferry]\ndb = dbname=x\nqueue_name = q\nfailover_reconcile = maybe\n")
    with pytest.raises(ConfigError, match="'failover_reconcile' must be auto or stop, not 'maybe'"):
        WorkerSettings.from_config(load_config(path))


def test_log_size_and_count(tmp_path: Path) -> None:
    logfile = tmp_path / "log" / "n.log"
    path = tmp_path / "n.ini"
    path.write_text(
        f"[pgferry]\ndb = dbname=x\nqueue_name = q\nlogfile = {logfile}\n"
        "log_size = 2000\nlog_count = 2\n"
    )
    setup_logging(config=load_config(path), console=False)
    try:
        for n in range(200):
            logging.getLogger("pgferry.test").info("line %d %s", n, "x" * 50)
    finally:
        setup_logging(console=False)
    files = sorted(p.name for p in logfile.parent.iterdir())
    assert files == ["n.log", "n.log.1", "n.log.2"]
    assert all(p.stat().st_size <= 2000 for p in logfile.parent.iterdir())


def _wait(check, timeout: float = 30) -> None:
    wait_until(check, timeout, "the condition")


def test_reload_reopens_the_log_file(tmp_path: Path, pg_a) -> None:
    logfile = tmp_path / "pgqd.log"
    pidfile = tmp_path / "pgqd.pid"
    ini = tmp_path / "pgqd.ini"
    ini.write_text(
        f"[pgqd]\nbase_connstr = {pg_a.connstr().rsplit(' dbname=', 1)[0]}\n"
        f"logfile = {logfile}\npidfile = {pidfile}\nticker_period = 0.2\n"
    )
    run = [sys.executable, "-m", "pgferry"]
    started = subprocess.run([*run, "-d", str(ini), "ticker"], capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    try:
        _wait(logfile.exists)
        rotated = logfile.with_name("pgqd.log.old")
        logfile.rename(rotated)  # what logrotate does
        subprocess.run([*run, "-r", str(ini), "ticker"], check=True, capture_output=True)
        _wait(lambda: logfile.exists() and "Reloading config" in logfile.read_text())
    finally:
        subprocess.run([*run, "-k", str(ini), "ticker"], capture_output=True)
        _wait(lambda: not pidfile.exists())


def test_json_log_format(tmp_path: Path) -> None:
    import json

    logfile = tmp_path / "n.log"
    path = tmp_path / "n.ini"
    path.write_text(
        f"[pgferry]\ndb = dbname=x\nqueue_name = q\nlogfile = {logfile}\nlog_format = json\n"
    )
    setup_logging(config=load_config(path), console=False)
    try:
        logging.getLogger("pgferry.test").warning("conn host=x password=s3cret é")
    finally:
        setup_logging(console=False)
    entry = json.loads(logfile.read_text().splitlines()[-1])
    assert entry["level"] == "WARNING" and entry["logger"] == "pgferry.test"
    assert "s3cret" not in entry["message"] and "é" in entry["message"]
    path.write_text("[pgferry]\ndb = dbname=x\nqueue_name = q\nlog_format = xml\n")
    with pytest.raises(ConfigError, match="setting 'log_format' must be text or json"):
        setup_logging(config=load_config(path), console=False)
