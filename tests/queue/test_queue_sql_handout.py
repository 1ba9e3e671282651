"""What the queue hands to other layers (their files in sql/queue/functions/ and
sql/ferry/functions/): make_tick, batch_event_sql with and without ordering, forward_events,
ferry.sync_tick."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from psycopg import sql
from queue_helpers import Scalar, tick

from pgferry import schema
from pgferry.queue import api as queue_api
from pgferry.queue import batches as queue_batches
from pgferry.queue import ticks as queue_ticks


def _snapshot(qdb: str) -> str:
    """A snapshot taken now by another session (its transaction ends at once)."""
    with psycopg.connect(qdb) as other:
        row = other.execute("select pg_current_snapshot()::text").fetchone()
    assert row is not None
    return row[0]


def test_make_tick_records_the_given_snapshot(
    qdb: str, qconn: psycopg.Connection, scalar: Scalar
) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.insert_event('q', 't', 'a')")
    scalar("select ferry_queue.insert_event('q', 't', 'b')")
    last = scalar("select last_tick_id from ferry_queue.get_queue_info('q')")
    snap = _snapshot(qdb)
    with psycopg.connect(qdb) as conn:
        conn.execute("set synchronous_commit = off")
        made = conn.execute("select ferry_queue.make_tick('q', %s::pg_snapshot)", (snap,))
        assert made.fetchone() == (last + 1,)  # type: ignore[operator]
        # The tick's transaction commits durably whatever the session asked for.
        assert conn.execute("show synchronous_commit").fetchone() == ("on",)
    row = qconn.execute(
        "select tick_snapshot::text, tick_event_seq from ferry_queue.tick where tick_id = %s",
        (last + 1,),  # type: ignore[operator]
    ).fetchone()
    assert row == (snap, 2)


def test_make_tick_refuses_a_snapshot_older_than_the_last_tick(
    qdb: str, qconn: psycopg.Connection, scalar: Scalar
) -> None:
    scalar("select ferry_queue.create_queue('q')")
    old = _snapshot(qdb)
    tick(qconn, "q")
    with pytest.raises(psycopg.errors.SerializationFailure, match="retry"):
        scalar("select ferry_queue.make_tick('q', %s::pg_snapshot)", old)
    with pytest.raises(psycopg.errors.NoDataFound, match="Unknown queue: nope"):
        scalar("select ferry_queue.make_tick('nope', pg_current_snapshot())")
    scalar("select ferry_queue.set_queue_config('q', 'external_ticker', 'true')")
    with pytest.raises(psycopg.errors.RaiseException, match="external ticker"):
        scalar("select ferry_queue.make_tick('q', pg_current_snapshot())")


def test_batch_event_sql_with_and_without_order(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    for i in range(5):
        scalar("select ferry_queue.insert_event('q', 't', %s)", str(i))
    tick(qconn, "q")
    batch = scalar("select ferry_queue.next_batch('q', 'c')")
    ordered = scalar("select ferry_queue.batch_event_sql(%s)", batch)
    assert scalar("select ferry_queue.batch_event_sql(%s, true)", batch) == ordered
    unordered = scalar("select ferry_queue.batch_event_sql(%s, false)", batch)
    assert isinstance(ordered, str) and isinstance(unordered, str)
    assert "order by" not in unordered and ordered == unordered + " order by ev_id"
    rows = qconn.execute(unordered.encode()).fetchall()
    assert sorted(r[5] for r in rows) == [str(i) for i in range(5)]
    assert queue_batches.batch_event_sql(qconn, batch, ordered=True) == ordered  # type: ignore[arg-type]
    assert queue_batches.batch_event_sql(qconn, batch) == unordered  # type: ignore[arg-type]


def test_forward_events_keeps_ids_in_the_current_table(
    qconn: psycopg.Connection, scalar: Scalar
) -> None:
    # A provider's batch, as a branch reads it.
    scalar("select ferry_queue.create_queue('src')")
    scalar("select ferry_queue.register_consumer('src', 'c')")
    scalar("select ferry_queue.insert_event('src', 'I:id', '{\"id\": 1}', 'public.t')")
    scalar("select ferry_queue.insert_event('src', 'x', null, 'e1', 'e2', 'e3', 'e4')")
    scalar("select ferry_queue.insert_event('src', 'y', 'z')")
    tick(qconn, "src")
    batch = scalar("select ferry_queue.next_batch('src', 'c')")
    cols = sql.SQL(", ").join(map(sql.Identifier, queue_api.FORWARDED_COLUMNS))
    text = scalar("select ferry_queue.batch_event_sql(%s)", batch)
    read = sql.SQL("select {} from ({}) e order by ev_id")
    rows = qconn.execute(read.format(cols, sql.SQL(str(text)))).fetchall()
    assert len(rows) == 3

    scalar("select ferry_queue.create_queue('dst')")
    scalar("select ferry_queue.set_queue_config('dst', 'external_ticker', 'true')")
    scalar("select ferry_queue.register_consumer('dst', 'c')")
    with qconn.transaction():
        assert queue_api.forward_events(qconn, "dst", rows) == 3
    queue_ticks.external_tick(qconn, "dst", 500, datetime.now(UTC), 3)
    copy = scalar("select ferry_queue.next_batch('dst', 'c')")
    got = qconn.execute(
        sql.SQL("select {} from ferry_queue.get_batch_events(%s) order by ev_id").format(cols),
        (copy,),
    ).fetchall()
    assert got == rows
    dst = scalar(
        "select queue_id * 10 + queue_cur_table from ferry_queue.queue where queue_name = 'dst'"
    )
    assert scalar("select count(*) from ferry_queue.event where ev_part = %s", dst) == 3
    assert queue_api.forward_events(qconn, "dst", []) == 0
    with pytest.raises(psycopg.errors.NoDataFound, match="Unknown queue: nope"):
        queue_api.forward_events(qconn, "nope", rows)


def test_sync_tick_makes_its_tick_through_the_queue(
    qdb: str, qconn: psycopg.Connection, scalar: Scalar
) -> None:
    with psycopg.connect(qdb) as conn:
        schema.install(conn, ("ferry",))
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.insert_event('q', 't', 'a')")
    snap = _snapshot(qdb)
    made = scalar("select ferry.sync_tick('q', %s::pg_snapshot)", snap)
    assert made == scalar("select last_tick_id from ferry_queue.get_queue_info('q')")
    row = qconn.execute(
        "select tick_snapshot::text, tick_event_seq from ferry_queue.tick where tick_id = %s",
        (made,),
    ).fetchone()
    assert row == (snap, 1)
    tick(qconn, "q")
    with pytest.raises(psycopg.errors.SerializationFailure):
        scalar("select ferry.sync_tick('q', %s::pg_snapshot)", snap)
    scalar("select ferry_queue.set_queue_config('q', 'external_ticker', 'true')")
    with pytest.raises(psycopg.errors.RaiseException, match="compare against the root"):
        scalar("select ferry.sync_tick('q', pg_current_snapshot())")
