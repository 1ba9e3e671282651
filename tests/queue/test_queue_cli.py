"""``pgferry CONFIG.ini install`` and the read-only ``queues`` / ``consumers`` commands."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgferry.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def node_ini(tmp_path: Path, db: str, section: str = "pgferry") -> Path:
    ini = tmp_path / "node.ini"
    ini.write_text(f"[{section}]\ndb = {db}\nqueue_name = q\n")
    return ini


def test_install_is_idempotent(
    db_a: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ini = node_ini(tmp_path, db_a, section="londiste3")
    code, out, _ = run(capsys, ini, "install")
    assert code == 0 and "Installing queue/tables/001_queue.sql" in out
    code, out, _ = run(capsys, ini, "install")
    assert code == 0 and "up to date" in out and "Installing" not in out
    with psycopg.connect(db_a) as conn:
        row = conn.execute(
            "select version from ferry_queue.schema_version where component = 'queue'"
        ).fetchone()
    assert row is not None and row[0] >= 1


def test_queue_inspection(db_a: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ini = node_ini(tmp_path, db_a)
    code, _, err = run(capsys, ini, "queues")
    assert code != 0 and "ferry_queue is not installed" in err
    run(capsys, ini, "install")
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute("select ferry_queue.create_queue('Qü')")
        conn.execute("select ferry_queue.register_consumer('Qü', 'reader')")
    code, out, _ = run(capsys, ini, "queues")
    assert code == 0 and "Qü" in out and "last_tick_id" in out
    code, out, _ = run(capsys, ini, "consumers", "Qü")
    assert code == 0 and "reader" in out and "pending_events" in out
    code, _, err = run(capsys, ini, "consumers", "nope")
    assert code != 0 and "Unknown queue: nope" in err and len(err.splitlines()) == 1


def test_install_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ini = node_ini(tmp_path, "host=127.0.0.1 port=1 user=postgres password=s3cret dbname=x")
    code, _, err = run(capsys, ini, "install")
    assert code != 0 and "cannot connect" in err
    assert "s3cret" not in err and len(err.strip().splitlines()) == 1
    broken = tmp_path / "broken.ini"
    broken.write_text("[pgferry]\nqueue_name = q\n")
    code, _, err = run(capsys, broken, "install")
    assert code != 0 and "missing setting 'db'" in err
    code, _, err = run(capsys, tmp_path / "absent.ini", "install")
    assert code != 0 and "config file not found" in err
