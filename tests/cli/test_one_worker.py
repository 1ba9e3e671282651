"""One worker per node, decided atomically, and a refused start says why in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg

from pgferry.errors import WaitTimeout
from pgferry.polling import wait_until
from pgferry.testing.commands import run_pgferry

pgferry = run_pgferry


def _gone(pidfile: Path, timeout: float = 30) -> bool:
    try:
        return wait_until(lambda: not pidfile.exists(), timeout=timeout, what="the pidfile gone")
    except WaitTimeout:
        return False


def test_one_worker_per_node(db_a, db_b, write_ini, cli, tmp_path) -> None:
    root_ini = write_ini("src", db_a)
    leaf_ini = write_ini("dst", db_b, spark_warm="false", loop_delay="0.2")
    assert cli(root_ini, "create-root", "src").code == 0
    assert cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0

    # Two detached starts at the same instant: exactly one runs.
    cmd = [sys.executable, "-m", "pgferry", "-d", str(leaf_ini), "worker"]
    starts = [subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in starts]  # type: ignore[union-attr]
    pidfile = tmp_path / "pid" / "dst.pid"
    try:
        assert sorted(code for code, _ in results) == [0, 1], results
        refused = next(err for code, err in results if code == 1).strip().splitlines()
        assert len(refused) == 1 and refused[0].startswith("pgferry: "), refused
        assert "another process running with pidfile" in refused[0]

        # Another ini (another pidfile) naming the same node: refused by the node's lock.
        other_ini = write_ini("dst_again", db_b, spark_warm="false")
        second = pgferry(other_ini, "worker")
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 1 and len(lines) == 1, second.stderr
        assert lines[-1].startswith("pgferry: Another worker is already running for this node")
        # ... naming the running worker's own process, not only its database session.
        running_pid = pidfile.read_text().strip()
        assert f"(worker process {running_pid} on " in lines[-1], lines[-1]
        assert "its database session is server pid " in lines[-1]
        assert "Traceback" not in second.stderr
        # ... and leaves the running node's status healthy.
        with psycopg.connect(db_b, autocommit=True) as conn:
            errors = conn.execute("select cur_error from ferry_node.local_state").fetchall()
        assert errors == [(None,)]
    finally:
        pgferry("-k", leaf_ini, "worker")
        assert _gone(pidfile)
    # The node is free again once its worker is gone.
    third = pgferry("-d", leaf_ini, "worker")
    assert third.returncode == 0, third.stderr
    pgferry("-k", leaf_ini, "worker")
    assert _gone(pidfile)


def test_unknown_switch_is_named(tmp_path, cli) -> None:
    res = cli("--frobnicate", tmp_path / "x.ini", "status")
    assert res.code == 2
    assert res.err.strip() == "pgferry: unknown switch: --frobnicate (see pgferry --help)"
