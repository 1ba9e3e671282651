"""A worker process killed with SIGKILL is seen as down: ``status`` shows ``WORKER DOWN`` and
exits 1, ``tables`` no longer shows its copy's rate and ETA and exits 1, and the provider's
worker reports ``pgferry_subscriber_worker_down``; a worker started again clears them all
and the copy it left ends with both sides equal.

The leaf's worker runs as the daemon does, a child process started by the command line,
killed in the middle of a chunked copy.  ``exception_sleep = 1``: a worker counts as down
once it has no lock and no heartbeat for 11 s (``node/worker_health.py``).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from pgferry.apply.worker import Worker
from pgferry.config import load_config
from pgferry.daemon import read_pid
from pgferry.errors import AlreadyRunning
from pgferry.metrics.worker import watch_worker
from pgferry.node import model, worker_health
from pgferry.polling import wait_until
from pgferry.testing.commands import run_pgferry
from pgferry.testing.scenario import process_running

TABLE = 'public."Big é"'
ROWS = 200_000
SETTINGS = {
    "exception_sleep": "1",
    "loop_delay": "0.2",
    "spark_warm": "false",
    "copy_snapshot_max": "0",  # every table copies in key-range chunks ...
    "copy_chunk_rows": "500",  # ... small ones: the copy lasts long enough to be killed
}


def q(dsn: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _worker_pid(ini: Path) -> int | None:
    pid = read_pid(ini.parent / "pid" / f"{ini.stem}.pid")
    return pid if pid is not None and process_running(pid) else None


@pytest.fixture
def nodes(db_a, db_b, write_ini, cli):
    root_ini = write_ini("src", db_a, **SETTINGS)
    leaf_ini = write_ini("dst", db_b, **SETTINGS)
    q(db_a, f"create table {TABLE} (id int primary key, v text)")
    q(db_a, f"insert into {TABLE} select g, md5(g::text) from generate_series(1, {ROWS}) g")
    q(db_b, f"create table {TABLE} (id int primary key, v text)")
    assert cli(root_ini, "create-root", "src").code == 0
    assert cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0
    assert cli(root_ini, "add-table", TABLE).code == 0
    yield root_ini, leaf_ini
    pid = _worker_pid(leaf_ini)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


def _chunks_done(dsn: str) -> int:
    """Chunks the copy has committed (its bookkeeping is made by the copy's start)."""
    if q(dsn, "select to_regclass('ferry_copy.range_done')") == [(None,)]:
        return 0
    return q(dsn, "select count(*) from ferry_copy.range_done")[0][0]


def _subscriber_down(root_ini: Path) -> float | None:
    worker = Worker(load_config(root_ini))
    registry = CollectorRegistry()
    watch_worker(registry, worker)
    return registry.get_sample_value(
        "pgferry_subscriber_worker_down",
        {"queue": "replika", "node": "src", "subscriber": "dst"},
    )


def _start_worker(ini: Path) -> int:
    proc = run_pgferry("-d", ini, "worker")
    assert proc.returncode == 0, proc.stderr
    return wait_until(lambda: _worker_pid(ini), timeout=30, what="the worker's pidfile")


def test_killed_worker_shows_down_until_started_again(db_a, db_b, nodes, cli) -> None:
    root_ini, leaf_ini = nodes
    pid = _start_worker(leaf_ini)
    assert cli(leaf_ini, "add-table", TABLE).code == 0
    # Killed in the middle of its copy, once some chunks are in.
    wait_until(
        lambda: _chunks_done(db_b) >= 3,
        timeout=60,
        interval=0.02,
        what="the first chunks",
    )
    res = cli(leaf_ini, "tables")
    assert res.code == 0 and "rows/s" in res.out, res
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process_running(pid), timeout=30, what="the worker to die")
    in_copy = q(db_b, "select merge_state from ferry.table_info where local")
    assert in_copy == [("in-copy",)]

    def down() -> dict | None:
        data = json.loads(cli(leaf_ini, "status", "--json").out)
        return data if "worker of dst down" in data["problems"] else None

    limit = worker_health.down_after(load_config(leaf_ini)) + 30
    data = wait_until(down, timeout=limit, interval=0.5, what="the dead worker to show")
    dst = next(n for n in data["nodes"] if n["name"] == "dst")
    assert "no session holds the node's lock" in dst["worker_down"]
    assert any("stalled at" in c and "worker down" in c for c in dst["copies"]), dst

    res = cli(leaf_ini, "status")
    assert res.code == 1
    assert "WORKER DOWN: no heartbeat for " in res.out
    assert "ETA" not in res.out and "rows/s" not in res.out
    assert res.err.strip().splitlines()[-1] == "pgferry: status: worker of dst down"
    res = cli(root_ini, "status")  # seen from the root as well
    assert res.code == 1 and "worker of dst down" in res.err
    res = cli(leaf_ini, "tables")
    assert res.code == 1 and "ETA" not in res.out and "rows/s" not in res.out
    assert "stalled at" in res.out
    assert "pgferry: tables: worker of dst down: no heartbeat for" in res.err
    assert _subscriber_down(root_ini) == 1

    # Started again: the copy resumes and ends; nothing is reported any more.
    _start_worker(leaf_ini)
    wait_until(
        lambda: q(db_b, "select merge_state from ferry.table_info where local") == [("ok",)],
        timeout=120,
        what="the copy to end",
    )
    res = cli(leaf_ini, "status")
    assert res.code == 0 and "WORKER" not in res.out, res
    assert cli(leaf_ini, "tables").code == 0
    assert _subscriber_down(root_ini) == 0
    rows = f"select id, v from {TABLE} order by id"
    assert q(db_a, rows) == q(db_b, rows)


def test_stopped_worker_counts_as_down_and_a_new_node_does_not(db_b, nodes, cli) -> None:
    """A node whose worker never ran is being set up: not judged.  A worker stopped with
    -s is down like a killed one once its heartbeat is old."""
    root_ini, leaf_ini = nodes
    res = cli(leaf_ini, "status")
    assert res.code == 0 and "WORKER" not in res.out, res
    _start_worker(leaf_ini)
    wait_until(
        lambda: q(db_b, "select last_seen is not null from ferry_node.local_state")[0][0],
        timeout=30,
        what="the first heartbeat",
    )
    assert cli(leaf_ini, "status").code == 0
    proc = run_pgferry("-s", leaf_ini, "worker")
    assert proc.returncode == 0, proc.stderr
    wait_until(lambda: _worker_pid(leaf_ini) is None, timeout=30, what="the worker to stop")
    res = cli(leaf_ini, "status")
    assert res.code == 0, res  # its heartbeat is recent: it may be retrying after an error
    wait_until(lambda: cli(leaf_ini, "status").code == 1, timeout=40, interval=0.5, what="down")
    res = cli(leaf_ini, "status")
    assert "WORKER DOWN: no heartbeat for 1" in res.out, res  # 11 s or more


def test_a_lock_of_another_database_is_not_this_nodes(new_db_b, db_a, write_ini, cli) -> None:
    """Two leaves of one queue in two databases of one server: the worker lock of one is not
    the other's.  Advisory locks are per database, but ``pg_locks`` lists the server's."""
    leaves = [new_db_b(None), new_db_b(None)]
    root_ini = write_ini("src", db_a, **SETTINGS)
    inis = [write_ini(f"dst{i}", dsn, **SETTINGS) for i, dsn in enumerate(leaves)]
    assert cli(root_ini, "create-root", "src").code == 0
    for i, ini in enumerate(inis):
        assert cli(ini, "create-leaf", f"dst{i}", f"--provider={db_a}").code == 0
    # dst1's worker runs (holds its lock); dst0's ran and died an hour ago.
    with psycopg.connect(leaves[1], autocommit=True) as other:
        model.lock_node(other, "replika")
        q(leaves[0], "update ferry_node.local_state set last_seen = now() - interval '1 hour'")
        q(leaves[1], "update ferry_node.local_state set last_seen = now()")
        with psycopg.connect(leaves[0], autocommit=True) as conn:
            reading = worker_health.read(conn, "replika")
        assert reading is not None and reading.lock_pid is None
        res = cli(root_ini, "status")
        assert res.code == 1 and "worker of dst0 down" in res.err, res
        assert "worker of dst1" not in res.err
        # A second worker of dst1 is refused naming dst1's session, not another's.
        with (
            psycopg.connect(leaves[0], autocommit=True) as mine,
            psycopg.connect(leaves[1], autocommit=True) as second,
        ):
            model.lock_node(mine, "replika")
            with pytest.raises(AlreadyRunning) as refused:
                model.lock_node(second, "replika")
        assert f"server pid {other.info.backend_pid}" in str(refused.value)
