"""Initial copy while the source keeps changing: the hand-over loses and doubles nothing."""

from __future__ import annotations

import contextlib
import random

import psycopg

from pgferry.testing.load import Load


def _writer(dsn: str, seed: int) -> Load:
    rng = random.Random(seed)

    def unit(conn: psycopg.Connection, _done: int) -> None:
        # add-table's trigger set-up may meet a writer: that writer just goes on
        with contextlib.suppress(psycopg.errors.DeadlockDetected):
            _write_some(conn, rng)

    return Load(dsn, unit, every=0, transaction=False)


def _write_some(conn: psycopg.Connection, rng: random.Random) -> None:
    with conn.transaction():
        for _ in range(5):
            k = rng.randint(1, 3000)
            op = rng.random()
            if op < 0.5:
                for table in ("a", "b"):
                    conn.execute(
                        f"insert into {table} (id, v) values (%s, 1)"
                        f" on conflict (id) do update set v = {table}.v + 1",
                        (k,),
                    )
            elif op < 0.8:
                conn.execute("update a set v = v + 10 where id = %s", (k,))
            else:
                conn.execute("delete from b where id = %s", (k,))


def test_copy_under_concurrent_writes(pair) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.a (id int primary key, v int)")
        side("create table public.b (id int primary key, v int)")
    pair.root("insert into a select g, 0 from generate_series(1, 2000) g")
    pair.root("insert into b select g, 0 from generate_series(1, 2000) g")
    writers = [_writer(pair.root_dsn, seed) for seed in (1, 2)]
    for t in writers:
        t.start()
    try:
        pair.root("select ferry_queue.ticker(%s)", (pair.queue,))
        pair.add_tables("public.a", "public.b")  # one group: one snapshot
        worker = pair.worker(replay_local_events="0")
        for _ in range(6):  # copy, then replay some batches while writes go on
            pair.tick()
            worker.work()
            worker.work()
    finally:
        for t in writers:
            t.stop()
    pair.catch_up(worker)
    assert pair.leaf(
        "select table_name, merge_state, copy_snapshot is null from ferry.table_info order by 1"
    ) == [("public.a", "ok", True), ("public.b", "ok", True)]
    pair.same("a")
    pair.same("b")


def test_sequences_follow_and_never_go_back(pair) -> None:
    from pgferry.node import seqops

    pair.root("create sequence public.s")
    pair.leaf("create sequence public.s")
    pair.root("select setval('public.s', 500)")
    for cfg, dsn in ((pair.root_cfg, pair.root_dsn), (pair.leaf_cfg, pair.leaf_dsn)):
        with psycopg.connect(dsn) as conn:
            seqops.add_seqs(cfg, conn, ["public.s"])
    root_worker = pair.root_worker()
    pair.root("select setval('public.s', 1234)")
    root_worker.work()
    pair.catch_up()
    # The root publishes ahead of what it hands out, by the sequence buffer.
    assert pair.leaf("select last_value from public.s") == [(1234 + seqops.DEFAULT_SEQ_BUFFER,)]
    pair.leaf("select setval('public.s', 5000)")
    pair.root("select setval('public.s', 2000)")
    root_worker.work()
    pair.catch_up()
    assert pair.leaf("select last_value from public.s") == [(5000,)]
