"""``connection_lifetime``: the worker reopens its node's and provider's connections when
the node's is older than that, keeps the node's lock through it, and replicates on.

A second-long lifetime, crossed several times between batches and while rows are written
on the root; the leaf's table is compared with the root's after each.  The lock's session
must stay the same: reopening it would leave the node without a worker for a moment.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgferry.apply.worker import Worker
from pgferry.testing.scenario import wait_until

TABLE = sql.Identifier("public", "Recycled é")


def _pid(conn: psycopg.Connection | None) -> int:
    assert conn is not None and not conn.closed
    return conn.info.backend_pid


def _recycle(worker: Worker) -> None:
    """Step the worker (idle loops) until it has reopened its connections once more."""
    before = worker.conns.recycled

    def stepped() -> bool:
        worker.work()
        return worker.conns.recycled > before

    wait_until(stepped, 30, "the worker to reopen its connections")


def test_worker_replicates_across_connection_recycles(pair) -> None:
    create = sql.SQL("create table {} (id int primary key, v text)").format(TABLE)
    for side in (pair.root, pair.leaf):
        side(create.as_string(None))
    pair.add_tables('public."Recycled é"')
    worker = pair.worker(connection_lifetime="1")
    pair.catch_up(worker)
    lock_pid = _pid(worker.conns.lock)
    insert = sql.SQL("insert into {} select g, 'v' || g from generate_series(%s::int, %s::int) g")
    update = sql.SQL("update {} set v = v || '+' where id %% 3 = %s")
    seen_local: set[int] = set()
    for round_ in range(4):
        seen_local.add(_pid(worker.conns.local))
        pair.root(insert.format(TABLE).as_string(None), (round_ * 100 + 1, round_ * 100 + 100))
        pair.root(update.format(TABLE).as_string(None), (round_ % 3,))
        _recycle(worker)
        # The rows written before the recycle are applied on the new connections.
        pair.catch_up(worker)
        pair.same(TABLE.as_string(None))
        assert _pid(worker.conns.lock) == lock_pid
    assert worker.conns.recycled >= 4
    assert len(seen_local) >= 4  # a new node connection each round
    assert worker.errors_total == 0
    assert pair.leaf("select cur_error from ferry_node.local_state") == [(None,)]
    assert pair.leaf(f"select count(*) from {TABLE.as_string(None)}") == [(400,)]
