"""Chunked copy: key ranges read in short provider transactions, replay converging after.

A writer changes the table during each copy; every test ends comparing both sides.
"""

from __future__ import annotations

import re
import threading

import psycopg
import pytest

from pgferry.errors import UsageError
from pgferry.pipeline.copy import chunked
from pgferry.registry import entries
from pgferry.testing.load import KeyChurn
from tests.fixtures.fix_cli import one_error

ROWS = 3000
CHUNKS = {"copy_snapshot_max": "0", "copy_chunk_rows": "300", "exception_sleep": "0"}


def _tables(pair, keyless: bool = False) -> None:
    key = "" if keyless else " primary key"
    for side in (pair.root, pair.leaf):
        side(f"create table public.t (id int{key}, v int, s text)")
    pair.root(f"insert into t select g, 0, md5(g::text) from generate_series(1, {ROWS}) g")
    pair.root("select ferry_queue.ticker(%s)", (pair.queue,))


def _copy_under_writes(pair, worker_settings: dict | None = None, **opts) -> None:
    writer = KeyChurn(pair.root_dsn, ROWS + 500, seed=1)
    writer.start()
    try:
        pair.add_tables("public.t", **opts)
        worker = pair.worker(**(worker_settings or {}))
        for _ in range(8):
            pair.tick()
            worker.work()
    finally:
        writer.stop()
    pair.catch_up(worker)


def _same(pair) -> None:
    q = "select id, v, s from t order by id"
    assert pair.root(q) == pair.leaf(q)


def _mode(pair) -> list[tuple]:
    return pair.leaf("select merge_state, copy_mode from ferry.table_info")


def test_chunked_copy_under_writes_ends_equal(make_pair) -> None:
    pair = make_pair(**CHUNKS)
    _tables(pair)
    _copy_under_writes(pair)
    assert _mode(pair) == [("ok", "chunked")]
    _same(pair)
    # The catch-up met rows the chunks already held or lacked: no divergence counted.
    assert pair.leaf("select coalesce(sum(diverged_rows), 0) from ferry_node.local_state") in (
        [(0,)],
        [(None,)],
    )


def test_stopped_mid_chunks_resumes_with_the_rest(make_pair, monkeypatch) -> None:
    pair = make_pair(**CHUNKS)
    _tables(pair)
    real = chunked._copy_chunk
    first: list[int] = []
    second: list[int] = []
    crash = threading.Event()

    lock = threading.Lock()  # the copy's two streams call it at once

    def failing(job, plan_no, chunk_no, where, src, dst):
        with lock:
            if len(first) == 4:
                crash.set()
                raise RuntimeError("worker killed")
            first.append(chunk_no)
        return real(job, plan_no, chunk_no, where, src, dst)

    monkeypatch.setattr(chunked, "_copy_chunk", failing)
    writer = KeyChurn(pair.root_dsn, ROWS + 500, seed=7)
    writer.start()
    try:
        pair.add_tables("public.t")
        worker = pair.worker()
        done_sql = "select count(*) from ferry_copy.range_done"

        def stopped() -> bool:  # the failed chunk, and the one beside it finished
            worker.work()
            return crash.is_set() and pair.leaf(done_sql)[0][0] == 4

        pair.cascade.wait_for(stopped, 60, "the copy to stop mid-chunks")
        assert pair.leaf("select merge_state from ferry.table_info") == [("in-copy",)]
        planned = pair.leaf("select count(*) from ferry_copy.chunk")[0][0]
        assert planned >= 8

        def recording(job, plan_no, chunk_no, where, src, dst):
            second.append(chunk_no)  # list.append: safe from both streams
            return real(job, plan_no, chunk_no, where, src, dst)

        monkeypatch.setattr(chunked, "_copy_chunk", recording)
        worker = pair.worker()  # the stopped worker's successor
        for _ in range(4):
            pair.tick()
            worker.work()
    finally:
        writer.stop()
    pair.catch_up(worker)
    assert not set(first) & set(second)
    assert sorted(first + second) == list(range(planned))
    assert _mode(pair) == [("ok", "chunked")]
    _same(pair)


def test_resync_of_a_chunked_table(make_pair) -> None:
    pair = make_pair(**CHUNKS)
    _tables(pair)
    _copy_under_writes(pair)
    pair.leaf("set session_replication_role = replica; delete from t where id % 7 = 0")
    writer = KeyChurn(pair.root_dsn, ROWS + 500, seed=3)
    writer.start()
    try:
        assert pair.cascade.cli("leafnode", "resync", "public.t").code == 0
        worker = pair.worker()
        for _ in range(6):
            pair.tick()
            worker.work()
    finally:
        writer.stop()
    pair.catch_up(worker)
    assert _mode(pair) == [("ok", "chunked")]
    _same(pair)


def test_keyless_table_keeps_one_snapshot(make_pair) -> None:
    pair = make_pair(**CHUNKS)
    _tables(pair, keyless=True)
    with pytest.raises(UsageError, match="cannot be copied in chunks: it has no primary key"):
        pair.add_tables("public.t", copy_mode="chunked")
    refused = one_error(
        pair.cascade.cli("leafnode", "add-table", "public.t", "--copy-mode=chunked")
    )
    assert refused.endswith("public.t cannot be copied in chunks: it has no primary key")
    assert pair.leaf("select count(*) from ferry.table_info where local") == [(0,)]
    pair.cascade.add("leafnode", "public.t")
    pair.catch_up()
    assert _mode(pair) == [("ok", None)]
    q = "select id, v, s from t order by id, v"
    assert pair.root(q) == pair.leaf(q)


def test_forced_snapshot_and_size_choice(make_pair) -> None:
    pair = make_pair(copy_snapshot_max="1GB")
    _tables(pair)
    pair.add_tables("public.t")  # small: one snapshot
    pair.catch_up()
    assert _mode(pair) == [("ok", None)]
    again = pair.cascade.cli("leafnode", "add-table", "public.t", "--copy-mode=chunked")
    assert "--copy-mode (stored: by size)" in one_error(again)
    assert "resync --copy-mode for --copy-mode" in again.err
    assert pair.cascade.cli("leafnode", "resync", "public.t", "--copy-mode=chunked").code == 0
    pair.catch_up()
    assert _mode(pair) == [("ok", "chunked")]
    _same(pair)


def test_no_long_transaction_on_the_provider(make_pair, monkeypatch) -> None:
    """No copy transaction outlives a chunk, and vacuum removes rows deleted mid-copy."""
    pair = make_pair(copy_snapshot_max="0", copy_chunk_rows="100")
    _tables(pair)
    pair.root("create table scratch (id int primary key)")
    pair.root("insert into scratch select generate_series(1, 200)")
    real = chunked._copy_chunk
    seen: list[float] = []
    dead: list[int] = []
    shown: list[str] = []
    db = pair.root("select current_database()")[0][0]

    def slow(job, plan_no, chunk_no, where, src, dst):
        # Meanwhile the provider commits other work: rows deleted at the 3rd chunk must
        # be removable by a vacuum at the 8th, which no held snapshot would allow.
        if chunk_no == 3:
            pair.root("delete from scratch")
        if chunk_no == 5:  # what tables and status show meanwhile
            with psycopg.connect(pair.leaf_dsn) as conn:
                shown.extend(p.text() for p in entries.copy_progress(conn, pair.queue))
        if chunk_no == 8:
            pair.root("vacuum scratch")
            dead.append(
                pair.root("select n_dead_tup from pg_stat_user_tables where relname = 'scratch'")[
                    0
                ][0]
            )
        rows = real(job, plan_no, chunk_no, where, src, dst)
        pair.root("select pg_sleep(0.05)")
        return rows

    stop = threading.Event()

    def watch() -> None:
        with psycopg.connect(pair.root_dsn, autocommit=True) as conn:
            while not stop.is_set():
                seen.extend(
                    float(r[0])
                    for r in conn.execute(
                        "select extract(epoch from now() - xact_start) from pg_stat_activity"
                        " where datname = %s and application_name = 'pgferry-copy'"
                        " and xact_start is not null",
                        (db,),
                    ).fetchall()
                )
                stop.wait(0.01)

    monkeypatch.setattr(chunked, "_copy_chunk", slow)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        pair.add_tables("public.t")
        pair.catch_up()
    finally:
        stop.set()
        watcher.join()
    assert _mode(pair) == [("ok", "chunked")]
    assert seen, "no copy transaction observed"
    assert max(seen) < 1.0, seen  # a chunk's time, not the copy's
    assert dead == [0]  # the horizon moved on past the delete while the copy ran
    assert len(shown) == 1 and re.fullmatch(
        r"[\d,]+/3,000 rows \(\d+%, ETA \S+\), chunk \d+/30, [\d,]+ rows/s", shown[0]
    ), shown
    _same(pair)
