"""Batch semantics under concurrency: many writers, long and rolled-back transactions, a
lagging consumer, ticks and rotation all at the same time.

Checked: every committed row reaches every consumer exactly once, nothing rolled back ever
appears, batches follow each other in tick order, each event sits in the batch whose closing
tick first sees its transaction committed, and rotation ran meanwhile without losing events.
Each batch is also read as replay reads a small one, with its range as parameters
(``batch_range_args`` into a statement prepared once per session): the same events.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from pgferry.apply.replay.read import read_only_results
from pgferry.db import connect
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import EventRange

WRITERS = 6
RUN_SECONDS = 4.0


class Stop(threading.Event):
    pass


def _loop(stop: Stop, errors: list[BaseException], body: Callable[[], None]) -> None:
    try:
        while not stop.is_set():
            body()
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


def _generic(reader: psycopg.Connection, conn: psycopg.Connection, batch: int) -> list[tuple]:
    """The batch's (ev_id, ev_txid, ev_data) read on ``reader`` as replay reads a small
    batch: the generic event query, prepared once, with the batch's range."""
    args = conn.execute(
        "select queue_id, sub_id, prev_xmax::text, next_xmax::text, next_snapshot::text,"
        " running::text from ferry_queue.batch_range_args(%s)",
        (batch,),
    ).fetchone()
    assert args is not None
    generic = queue_batches.generic_event_sql(reader)
    (rows,) = read_only_results(reader, [generic], events=EventRange(*args))
    return sorted((r[0], r[2], r[5]) for r in rows)


def _drain(
    conn: psycopg.Connection,
    consumer: str,
    out: list[dict],
    custom: bool,
    reader: psycopg.Connection,
) -> None:
    """Take every ready batch, remembering its ticks, snapshots and events."""
    while True:
        with conn.transaction():
            if custom:
                query = "select ferry_queue.next_batch_custom('q', %s, null, 1000, null)"
            else:
                query = "select ferry_queue.next_batch('q', %s)"
            batch = conn.execute(query, (consumer,)).fetchone()[0]  # type: ignore[index]
            if batch is None:
                return
            info = conn.execute(
                "select prev_tick_id, tick_id, prev_snapshot, snapshot"
                " from ferry_queue.get_batch_info(%s)",
                (batch,),
            ).fetchone()
            events = conn.execute(
                "select ev_id, ev_txid, ev_data from ferry_queue.get_batch_events(%s)", (batch,)
            ).fetchall()
            # Read apart, with the same events (the batch is open in this transaction:
            # its range's values come from here, the events are committed).
            assert _generic(reader, conn, batch) == sorted(events)
            conn.execute("select ferry_queue.finish_batch(%s)", (batch,))
        assert info is not None
        out.append({"prev": info[0], "tick": info[1], "s1": info[2], "s2": info[3], "ev": events})


@pytest.mark.slow
def test_exactly_once_under_concurrency(qdb: str) -> None:
    with psycopg.connect(qdb, autocommit=True) as admin:
        admin.execute("create table t (id bigserial primary key, writer int, n int)")
        admin.execute("select ferry_queue.create_queue('q')")
        admin.execute("select ferry_queue.set_queue_config('q', 'rotation_period', '0')")
        admin.execute("select ferry_queue.attach_capture('q', 't')")
        for name in ("fast", "slow", "custom"):
            admin.execute("select ferry_queue.register_consumer('q', %s)", (name,))

    stop = Stop()
    errors: list[BaseException] = []
    committed: set[tuple[int, int]] = set()
    lock = threading.Lock()
    batches: dict[str, list[dict]] = {"fast": [], "slow": [], "custom": []}
    rotations = [0]

    def writer(w: int) -> Callable[[], None]:
        conn = psycopg.connect(qdb)
        rng = random.Random(w)
        counter = iter(range(10**9))

        def body() -> None:
            rows = [(w, next(counter)) for _ in range(rng.randint(1, 4))]
            for row in rows:
                conn.execute("insert into t (writer, n) values (%s, %s)", row)
            if rng.random() < 0.2:
                conn.rollback()  # never to be seen
            else:
                conn.commit()
                with lock:
                    committed.update(rows)

        return body

    def ticker() -> Callable[[], None]:
        conn = psycopg.connect(qdb, autocommit=True)

        def body() -> None:
            conn.execute("select ferry_queue.force_tick('q')")
            conn.execute("select ferry_queue.ticker()")
            time.sleep(0.02)

        return body

    def maint() -> Callable[[], None]:
        conn = psycopg.connect(qdb, autocommit=True)

        def body() -> None:
            for func, arg in conn.execute("select * from ferry_queue.maint_operations()"):
                if func.endswith("step1"):
                    before = conn.execute("select queue_cur_table from ferry_queue.queue")
                    old = before.fetchone()
                    conn.execute("select ferry_queue.maint_rotate_tables_step1(%s)", (arg,))
                    now = conn.execute("select queue_cur_table from ferry_queue.queue")
                    rotations[0] += now.fetchone() != old
                else:
                    conn.execute("select ferry_queue.maint_rotate_tables_step2()")
            time.sleep(0.05)

        return body

    def consumer(name: str, pause: float, custom: bool = False) -> Callable[[], None]:
        conn = psycopg.connect(qdb, autocommit=True)
        reader = connect(qdb, autocommit=True)

        def body() -> None:
            _drain(conn, name, batches[name], custom, reader)
            time.sleep(pause)

        return body

    bodies = [writer(w) for w in range(WRITERS)]
    bodies += [ticker(), maint(), consumer("fast", 0.01), consumer("slow", 1.0)]
    bodies += [consumer("custom", 0.3, custom=True)]
    threads = [threading.Thread(target=_loop, args=(stop, errors, b)) for b in bodies]

    long_conn = psycopg.connect(qdb)
    aborted_conn = psycopg.connect(qdb)
    with psycopg.connect(qdb, autocommit=True) as main:
        for th in threads:
            th.start()
        time.sleep(0.5)
        long_conn.execute("insert into t (writer, n) values (-1, 1), (-1, 2)")
        aborted_conn.execute("insert into t (writer, n) values (-2, 1)")
        time.sleep(RUN_SECONDS / 2)
        aborted_conn.rollback()
        last_before = main.execute(
            "select last_tick_id from ferry_queue.get_queue_info('q')"
        ).fetchone()[0]  # type: ignore[index]
        long_conn.commit()
        committed.update({(-1, 1), (-1, 2)})
        time.sleep(RUN_SECONDS / 2)
        stop.set()
        for th in threads:
            th.join(timeout=60)
        assert not errors, errors
        main.execute("select ferry_queue.force_tick('q')")
        final = main.execute("select ferry_queue.ticker('q')").fetchone()[0]  # type: ignore[index]
        with connect(qdb, autocommit=True) as reader:
            for name in batches:
                _drain(main, name, batches[name], False, reader)
    long_conn.close()
    aborted_conn.close()

    assert rotations[0] >= 1, "rotation never ran during the test"
    assert len(committed) > 100
    for name, got in batches.items():
        # Tick order, no gaps: each batch starts where the previous one ended.
        assert all(a["tick"] == b["prev"] for a, b in zip(got, got[1:], strict=False)), name
        assert got[-1]["tick"] == final
        if name == "custom":  # several ticks merged into one batch
            assert len(got) < len(batches["fast"])
        seen = [
            tuple(json.loads(data)[k] for k in ("writer", "n")) for b in got for *_, data in b["ev"]
        ]
        assert len(seen) == len(set(seen)), f"{name}: duplicates"
        assert set(seen) == committed, f"{name}: lost or phantom events"
        long_batches = [b for b in got if any('"writer":-1' in e[2] for e in b["ev"])]
        assert len(long_batches) == 1 and long_batches[0]["tick"] > last_before

    # Membership by visibility: each event is committed in the closing tick's snapshot and
    # not in the opening one's (checked by PostgreSQL itself).
    with psycopg.connect(qdb) as conn:
        for b in batches["fast"]:
            txids = [e[1] for e in b["ev"]]
            bad = conn.execute(
                "select count(*) from unnest(%s::bigint[]) x"
                " where not pg_visible_in_snapshot(x::text::xid8, %s::pg_snapshot)"
                " or pg_visible_in_snapshot(x::text::xid8, %s::pg_snapshot)",
                (txids, b["s2"], b["s1"]),
            ).fetchone()[0]  # type: ignore[index]
            assert bad == 0
