"""The waits end when what they wait for cannot come: ``wait-root`` / ``wait-provider``
fail at once, naming the error, on a node in ERR; ``wait-sync`` does not report its
tables in sync while the root's ticker counts as stopped.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from pgferry.apply.worker import Worker
from pgferry.config import load_config
from pgferry.errors import PgferryError
from pgferry.polling import wait_until


def q(dsn: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def tick(dsn: str) -> None:
    q(dsn, "select ferry_queue.force_tick('replika')")
    q(dsn, "select ferry_queue.ticker('replika')")


@pytest.fixture
def pair(db_a, db_b, write_ini, cli):
    """Root ``src`` and leaf ``dst`` with ``public."T é"`` in sync; no ticker runs."""
    settings = {"ticker_stopped_after": "1", "loop_delay": "0.1"}
    root_ini = write_ini("src", db_a, **settings)
    leaf_ini = write_ini("dst", db_b, **settings)
    for dsn in (db_a, db_b):
        q(dsn, 'create table public."T é" (id int primary key, v int)')
    assert cli(root_ini, "create-root", "src").code == 0
    assert cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0
    assert cli(root_ini, "add-table", 'public."T é"').code == 0
    assert cli(leaf_ini, "add-table", 'public."T é"', "--expect-sync").code == 0
    tick(db_a)
    return root_ini, leaf_ini


def test_wait_root_fails_naming_the_error_of_a_node_in_err(db_a, db_b, pair, cli) -> None:
    root_ini, leaf_ini = pair
    # A check the root does not have: replay of v < 0 fails on the leaf, every retry.
    q(db_b, 'alter table public."T é" add constraint v_positive check (v >= 0)')
    q(db_a, 'insert into public."T é" values (1, 5), (2, -1)')
    tick(db_a)
    worker = Worker(load_config(leaf_ini))
    try:
        with pytest.raises(PgferryError, match="v_positive") as failure:
            for _ in range(20):
                worker.work()
        worker.on_error(failure.value)
        started = time.monotonic()
        for command in ("wait-root", "wait-provider"):
            res = cli(leaf_ini, command, "--timeout=30", "--poll=0.1")
            assert res.code == 1, res
            last = res.err.strip().splitlines()[-1]
            assert last.startswith("pgferry: Node dst is in error: "), last
            assert "v_positive" in last and "waiting for tick" in last
            assert "applied tick" not in res.out
        assert time.monotonic() - started < 20  # at once, not at the timeout

        # The cause removed, the worker applies the batch, the wait succeeds.
        q(db_b, 'alter table public."T é" drop constraint v_positive')
        wait_until(lambda: not worker.work() or None, timeout=30, what="the leaf to catch up")
        res = cli(leaf_ini, "wait-root", "--timeout=30", "--poll=0.1")
        assert res.code == 0, res
    finally:
        worker.shutdown()
    rows = 'select id, v from public."T é" order by id'
    assert q(db_a, rows) == q(db_b, rows) == [(1, 5), (2, -1)]


def test_wait_sync_fails_with_tables_ok_and_the_ticker_stopped(db_a, db_b, pair, cli) -> None:
    root_ini, leaf_ini = pair
    res = cli(leaf_ini, "wait-sync", "--timeout=30")
    assert res.code == 0, res  # idle queue: nothing waits, nothing to report
    q(db_a, 'insert into public."T é" select g, g from generate_series(1, 3) g')
    wait_until(
        lambda: cli(leaf_ini, "status").code == 1, timeout=30, interval=0.2, what="the alarm"
    )
    res = cli(leaf_ini, "wait-sync", "--timeout=30")
    assert res.code == 1, res
    last = res.err.strip().splitlines()[-1]
    assert last.startswith("pgferry: The ticker of root src has not ticked for "), last
    assert "All tables in sync" not in res.err
