"""root -> branch -> leaf: the branch applies, forwards every event and mirrors the ticks."""

from __future__ import annotations

import time

import psycopg

from pgferry.apply.worker import Worker
from pgferry.node import setup, tableops

DDL = "create table public.t (id int primary key, v text)"


def _run(worker: Worker, done, timeout: float = 120) -> None:
    """Run the worker until ``done()``; copies run beside its loop, so poll."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not worker.work():
            time.sleep(0.02)
        if done():
            return
    raise AssertionError("did not converge")


def test_branch_forwards_to_leaf(db_a, db_b, new_db_b, tmp_path, ini) -> None:
    write_ini = ini
    db_c = new_db_b(None)
    common = {"queue_name": "chain", "loop_delay": "0.1", "exception_sleep": "0.1"}
    root = write_ini(tmp_path / "r.ini", job_name="r_job", db=db_a, **common)
    branch = write_ini(tmp_path / "b.ini", job_name="b_job", db=db_b, **common)
    leaf = write_ini(tmp_path / "l.ini", job_name="l_job", db=db_c, **common)
    setup.create_node(root, setup.build_request(root, "root", "rnode", None, None))
    setup.create_node(branch, setup.build_request(branch, "branch", "bnode", None, db_a))
    setup.create_node(leaf, setup.build_request(leaf, "leaf", "lnode", None, db_b))

    def run(dsn: str, query: str, params=None):
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    for cfg in (root, branch, leaf):
        run(cfg.get("db"), DDL)
    run(db_a, "insert into t select g, 'x' from generate_series(1, 30) g")
    for cfg in (root, branch, leaf):
        with psycopg.connect(cfg.get("db")) as conn:
            tableops.add_tables(cfg, conn, ["public.t"], tableops.AddTableOptions())

    def tick() -> int:
        run(db_a, "select ferry_queue.force_tick('chain')")
        return run(db_a, "select ferry_queue.ticker('chain')")[0][0]

    def at(dsn: str, tick_id: int) -> bool:
        state = run(dsn, "select last_tick_id from ferry_node.local_state")[0][0]
        return (state or 0) >= tick_id

    def ok(dsn: str) -> bool:
        return run(dsn, "select merge_state from ferry.table_info") == [("ok",)]

    bw, lw = Worker(branch), Worker(leaf)
    try:
        for _ in range(4):
            target = tick()
            # The copy runs beside replay: wait for the tick and for the copy's hand-over.
            _run(bw, lambda t=target: at(db_b, t) and ok(db_b))
        assert run(db_b, "select merge_state from ferry.table_info") == [("ok",)]
        run(db_a, "update t set v = 'changed' where id <= 10")
        run(db_a, "delete from t where id > 25")
        run(db_a, "insert into t values (100, 'new')")
        for _ in range(4):
            target = tick()
            _run(bw, lambda t=target: at(db_b, t))
            _run(lw, lambda t=target: at(db_c, t) and ok(db_c))
        assert run(db_c, "select merge_state from ferry.table_info") == [("ok",)]
        expected = run(db_a, "select * from t order by id")
        assert run(db_b, "select * from t order by id") == expected
        assert run(db_c, "select * from t order by id") == expected
        # The branch's own queue holds the provider's tick ids.
        assert run(db_b, "select max(tick_id) from ferry_queue.tick")[0][0] == target
    finally:
        bw.shutdown()
        lw.shutdown()
