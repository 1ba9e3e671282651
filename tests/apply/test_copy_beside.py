"""Copies beside replay: the other tables keep replicating, and the copied table joins the
main stream exactly, also when the worker dies during the copy or during the catch-up.

Table ``a`` is replicated already; ``b`` (large enough that its copy takes a while) is
added while random changes go to both.  While ``b`` copies, ``a`` must keep up with its
source; in the end both equal their sources row for row, the group's own consumer is gone
from the provider, and a killed copy or catch-up loses and doubles nothing.
"""

from __future__ import annotations

import random
import time

import psycopg
import pytest

from pgferry.queue import batches as queue_batches
from pgferry.testing.scenario import step_until

ROWS = 200_000  # b's copy takes seconds on Spark local[2]: long enough to act during it
DDL = "create table public.{} (id int primary key, v int, note text)"


def _changes(dsn: str, rng: random.Random, count: int) -> None:
    """Random inserts, updates, key moves and deletes on a and b, a few per transaction."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(count):
            with conn.transaction():
                for _ in range(rng.randint(1, 4)):
                    table = rng.choice("ab")
                    k = rng.randint(1, ROWS + 500)
                    op = rng.random()
                    if op < 0.4:
                        conn.execute(
                            f"insert into {table} values (%s, %s, 'i') on conflict (id)"
                            f" do update set v = {table}.v + 1, note = 'u'",
                            (k, rng.randint(0, 9)),
                        )
                    elif op < 0.7:
                        conn.execute(f"update {table} set v = v * 2 where id = %s", (k,))
                    elif op < 0.85:
                        conn.execute(
                            f"update {table} set id = %s where id = %s and not exists"
                            f" (select 1 from {table} where id = %s)",
                            (k + 1, k, k + 1),
                        )
                    else:
                        conn.execute(f"delete from {table} where id = %s", (k,))


def _rows(pair, side: str, table: str) -> list[tuple]:
    query = f"select id, v, note from {table} order by id"
    return pair.root(query) if side == "root" else pair.leaf(query)


def _state(pair) -> str | None:
    return pair.leaf("select merge_state from ferry.table_info where table_name = 'public.b'")[0][0]


def _run_until(pair, worker, cond, timeout: float = 120) -> None:
    try:
        step_until(worker, cond, timeout, "the condition")
    except AssertionError as exc:
        raise AssertionError(f"{exc} (b is {_state(pair)})") from None


@pytest.mark.parametrize("kill", ["none", "copy", "catch-up"])
def test_copy_beside_replay(pair, monkeypatch, kill: str) -> None:
    rng = random.Random(f"beside-{kill}")
    for side in (pair.root, pair.leaf):
        side(DDL.format("a"))
        side(DDL.format("b"))
    pair.root(f"insert into a select g, 0, 'a' from generate_series(1, {ROWS // 10}) g")
    pair.root(f"insert into b select g, 0, 'b' from generate_series(1, {ROWS}) g")
    pair.add_tables("public.a")
    worker = pair.catch_up()
    pair.add_tables("public.b")
    _changes(pair.root_dsn, rng, 30)
    pair.tick()

    # The copy of b starts in the background; a keeps replicating meanwhile.
    _run_until(pair, worker, lambda: worker.copies_running() > 0)
    _changes(pair.root_dsn, rng, 30)
    target = pair.tick()
    _run_until(pair, worker, lambda: (pair.last_tick() or 0) >= target)
    if worker.copies_running():
        assert _state(pair) == "in-copy"
        assert _rows(pair, "leaf", "a") == _rows(pair, "root", "a")  # not stalled by b

    if kill == "copy" and worker.copies_running():
        worker.cancel_copies()  # the worker dies in the middle of the copy
        assert _state(pair) in ("in-copy", "catching-up")  # unless it had just finished
        worker = pair.worker()
    elif kill == "catch-up":
        _run_until(pair, worker, lambda: _state(pair) in ("catching-up", "ok"))
        _changes(pair.root_dsn, rng, 30)
        pair.tick()
        if _state(pair) == "catching-up":
            # The worker dies after a catch-up batch committed here, before its finish.
            real_finish = queue_batches.finish_batch

            def crash(conn, batch_id, **flags):
                if conn.execute(
                    "select 1 from ferry_queue.subscription where sub_batch = %s"
                    " and sub_consumer like '%%.copy.%%'",
                    (batch_id,),
                ).fetchone():
                    raise RuntimeError("killed before the group's finish_batch")
                real_finish(conn, batch_id, **flags)

            monkeypatch.setattr(queue_batches, "finish_batch", crash)
            with pytest.raises(RuntimeError, match="killed"):
                _run_until(pair, worker, lambda: False)
            monkeypatch.setattr(queue_batches, "finish_batch", real_finish)
            worker = pair.worker()

    _changes(pair.root_dsn, rng, 30)
    # b's copy starts Spark (a, small, was copied without it): its start is part of the wait.
    pair.catch_up(worker, timeout=180)
    assert _state(pair) == "ok"
    assert _rows(pair, "leaf", "a") == _rows(pair, "root", "a")
    assert _rows(pair, "leaf", "b") == _rows(pair, "root", "b")
    consumers = pair.root(
        "select sub_consumer from ferry_queue.subscription s join ferry_queue.queue q"
        " on q.queue_id = s.sub_queue where q.queue_name = %s",
        (pair.queue,),
    )
    assert [c for (c,) in consumers if ".copy." in c] == []


def test_tables_and_status_show_copy_progress(pair, capsys) -> None:
    from pgferry.cli.main import main
    from pgferry.registry import entries

    for side in (pair.root, pair.leaf):
        side(DDL.format("b"))
    pair.root(f"insert into b select g, 0, 'b' from generate_series(1, {ROWS}) g")
    pair.root("analyze b")  # the estimate the progress is measured against
    pair.add_tables("public.b")
    worker = pair.worker()
    _run_until(pair, worker, lambda: worker.copies_running() > 0)
    seen: list[str] = []
    shown = False
    while worker.copies_running():
        with psycopg.connect(pair.leaf_dsn) as conn:
            (row,) = entries.copy_progress(conn, pair.queue)
        seen.append(row.text())
        if row.rows:
            capsys.readouterr()
            assert main([str(pair.leaf_cfg.path), "tables"]) == 0
            out = capsys.readouterr().out
            assert out.splitlines()[0].split() == [
                "table_name", "merge_state", "table_attrs", "copy"
            ]  # fmt: skip
            assert "in-copy" in out and " rows (" in out
            assert main([str(pair.leaf_cfg.path), "status"]) == 0
            assert "Copy public.b: " in capsys.readouterr().out
            shown = True
            break
        time.sleep(0.05)
    assert shown and all("rows" in s or s == "waiting for copy" for s in seen), seen
    pair.catch_up(worker)
    assert _rows(pair, "leaf", "b") == _rows(pair, "root", "b")


def test_resync_of_one_table_does_not_stall_the_others(pair) -> None:
    rng = random.Random(7)
    for side in (pair.root, pair.leaf):
        side(DDL.format("a"))
        side(DDL.format("b"))
    pair.root(f"insert into b select g, 0, 'b' from generate_series(1, {ROWS}) g")
    pair.add_tables("public.a", "public.b")
    worker = pair.catch_up()
    from pgferry.node import resync

    with psycopg.connect(pair.leaf_dsn) as conn:
        resync.resync(pair.leaf_cfg, conn, ["public.b"], False)
    _run_until(pair, worker, lambda: worker.copies_running() > 0)
    seen_during_copy = False
    for _ in range(3):
        _changes(pair.root_dsn, rng, 20)
        target = pair.tick()
        _run_until(pair, worker, lambda t=target: (pair.last_tick() or 0) >= t)
        if worker.copies_running() and _rows(pair, "leaf", "a") == _rows(pair, "root", "a"):
            seen_during_copy = True
    assert seen_during_copy, "a did not keep up while b was copied"
    pair.catch_up(worker)
    assert _rows(pair, "leaf", "b") == _rows(pair, "root", "b")
