"""root -> branch -> leaf: the branch applies, forwards every event and mirrors the ticks."""

from __future__ import annotations

from pgferry.apply.worker import Worker
from pgferry.testing.cascade import sql_rows
from pgferry.testing.scenario import step_until

DDL = "create table public.t (id int primary key, v text)"


def _run(worker: Worker, done, timeout: float = 120) -> None:
    """Run the worker until ``done()``; copies run beside its loop, so poll."""
    step_until(worker, done, timeout, "the cascade to converge")


def test_branch_forwards_to_leaf(make_cascade, db_a, db_b, new_db_b) -> None:
    db_c = new_db_b(None)
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("branch", db_b, "branch", "root")
    c.node("leaf", db_c, "leaf", "branch")
    run = sql_rows

    for dsn in (db_a, db_b, db_c):
        run(dsn, DDL)
    run(db_a, "insert into t select g, 'x' from generate_series(1, 30) g")
    for name in ("root", "branch", "leaf"):
        c.add(name, "public.t")
    tick = c.tick

    def at(dsn: str, tick_id: int) -> bool:
        state = run(dsn, "select last_tick_id from ferry_node.local_state")[0][0]
        return (state or 0) >= tick_id

    def ok(dsn: str) -> bool:
        return run(dsn, "select merge_state from ferry.table_info") == [("ok",)]

    bw, lw = c.worker("branch"), c.worker("leaf")
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
