"""The tick the worker makes on its provider right after a copy (replication.handover)."""

from __future__ import annotations

import psycopg

from pgferry import schema
from pgferry.apply.handover import tick_now


def _queue_db(connstr: str) -> psycopg.Connection:
    with psycopg.connect(connstr) as conn:
        schema.install(conn, ("queue",))
    conn = psycopg.connect(connstr, autocommit=True)
    conn.execute("select ferry_queue.create_queue('q')")
    conn.execute("select ferry_queue.force_tick('q')")
    conn.execute("select ferry_queue.ticker('q')")
    return conn


def _ticks(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute(
        "select tick_id, pg_snapshot_xmin(tick_snapshot)::text::bigint from ferry_queue.tick"
        " order by tick_id"
    ).fetchall()


def test_tick_now_ticks_at_once_after_the_writes(db_a) -> None:
    with _queue_db(db_a) as conn:
        before = _ticks(conn)
        # A transaction committed "during the copy": the new tick's snapshot is past it.
        xid = int(conn.execute("select pg_current_xact_id()::text::bigint").fetchone()[0])
        with psycopg.connect(db_a) as provider:  # not autocommit: each step commits itself
            tick_now(provider, "q")
            assert provider.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        after = _ticks(conn)
        assert len(after) == len(before) + 1
        assert after[-1][1] > xid
        # The forced-tick request is used up: the ticker does not tick again for it.
        assert conn.execute("select ferry_queue.ticker('q')").fetchone()[0] is None


def test_tick_now_leaves_a_mirrored_queue_to_its_provider(db_a) -> None:
    with _queue_db(db_a) as conn:
        conn.execute("select ferry_queue.set_queue_config('q', 'queue_external_ticker', 'true')")
        before = _ticks(conn)
        tick_now(conn, "q")  # no error, no tick of its own
        assert _ticks(conn) == before
        forced = conn.execute("select queue_force_tick from ferry_queue.queue").fetchone()[0]
        assert forced is True
