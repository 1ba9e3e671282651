"""Files that may hold row data or secrets are their owner's alone (mode 0600), whatever
the umask: log files (and each one a rotation starts), pidfiles, repair files, resurrect
dumps.  Every test runs under umask 000, where a file opened the ordinary way is 0666."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgferry import daemon
from pgferry.log import setup_logging
from pgferry.node import resurrect


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    yield
    os.umask(old)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    yield
    setup_logging(quiet=True)  # the log files closed; the console as the other tests expect


def test_log_files_and_their_rotations_are_private(tmp_path, restore_logging) -> None:
    logfile = tmp_path / "log" / "node.log"
    setup_logging(logfile=logfile)
    (handler,) = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    handler.maxBytes = 200  # type: ignore[attr-defined]  # rotate after a line or two
    for n in range(10):
        logging.getLogger("pgferry.test").info("row %d: a value a reader should not see", n)
    files = sorted(logfile.parent.iterdir())
    assert [f.name for f in files] == ["node.log", "node.log.1", "node.log.2", "node.log.3"]
    assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}


def test_an_existing_log_keeps_the_mode_its_operator_gave(tmp_path, restore_logging) -> None:
    logfile = tmp_path / "node.log"
    logfile.touch()
    logfile.chmod(0o640)  # logrotate's "create 0640 pgferry adm"
    setup_logging(logfile=logfile)
    logging.getLogger("pgferry.test").info("a line")
    assert mode(logfile) == 0o640 and "a line" in logfile.read_text()


def test_pidfile_is_private_new_or_taken_over(tmp_path) -> None:
    pidfile = tmp_path / "pid" / "worker.pid"
    daemon.write_pidfile(pidfile)
    try:
        assert mode(pidfile) == 0o600
        assert daemon.read_pid(pidfile) == os.getpid()
    finally:
        daemon.remove_pidfile(pidfile)
    stale = tmp_path / "stale.pid"
    stale.write_text("999999\n")
    stale.chmod(0o666)
    daemon.write_pidfile(stale)  # a stale one is taken over, and made private
    try:
        assert mode(stale) == 0o600
    finally:
        daemon.remove_pidfile(stale)


def test_resurrect_dump_is_private(tmp_path) -> None:
    dump = tmp_path / "lost.json"
    resurrect._write_dump(dump, {"events": [{"ev_data": "id=1&card=4111"}]})
    assert mode(dump) == 0o600 and "4111" in dump.read_text()


def test_diff_repair_file_is_private(db_a, db_b, cli, tmp_path) -> None:
    """``diff --repair FILE`` end to end; a file already there (0666) is written over and
    made private too."""
    for db in (db_a, db_b):
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("create table t (id int primary key, card text)")
            conn.execute("insert into t values (1, '4111-1111'), (2, '5500-0000')")
    with psycopg.connect(db_b, autocommit=True) as conn:
        conn.execute("delete from t where id = 2")
    fix = tmp_path / "fix.sql"
    fix.write_text("old\n")
    fix.chmod(0o666)
    res = cli("diff", db_a, "t", db_b, "t", "--repair", fix)
    assert res.code == 1, res.err
    assert "5500-0000" in fix.read_text()
    assert mode(fix) == 0o600


def test_repair_dir_files_are_private(tmp_path) -> None:
    from pgferry.sync import repair

    path = tmp_path / "fix.t.sql"
    repair._write_fix(path, "t", ["insert into t values (1, 'secret');"])
    assert mode(path) == 0o600
