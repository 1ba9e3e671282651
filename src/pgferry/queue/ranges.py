"""Reading a queue between any two ticks it holds, without a batch: for a reader that
keeps its own position (the Spark change feed keeps it in Spark's checkpoint).

A batch reads the events between its consumer's position and the next tick, and only
while it is open.  A reader that may have to read a stretch again after a crash (Spark
replays its last planned micro-batch from the checkpoint) needs the same events for any
pair of ticks: :func:`tick_spans` composes, for each pair of consecutive ticks, the
SELECT of exactly the events a batch between them would hold (the same snapshot
arithmetic as ``ferry_queue.batch_event_sql``), with every value inlined so that any
connection can run it.  The queue keeps ticks and events only from its lowest consumer
position on: such a reader registers a consumer and moves it with :func:`move_consumer`
once it will never ask for the ticks before again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import sql

from pgferry.errors import QueueError


@dataclass(frozen=True)
class TickMark:
    """A tick: id, time, and the queue's event position when it was made."""

    tick_id: int
    tick_time: datetime
    event_seq: int


@dataclass(frozen=True)
class TickSpan:
    """The events between two consecutive ticks ``(prev_tick, tick]``, as a SELECT of the
    event columns (``pgferry.events.EVENT_COLUMN_NAMES``) any connection can run."""

    prev_tick: int
    tick: int
    tick_time: datetime
    events: int  # event positions the span covers (a count, but for long transactions)
    query: str


def tick_marks_after(
    conn: psycopg.Connection, queue: str, after: int, upto: int | None = None
) -> list[TickMark]:
    """Tick ``after`` and every tick of ``queue`` past it (up to ``upto``), by id.

    QueueError when the queue does not hold tick ``after`` (unknown queue, or a tick the
    queue has let go: no consumer stood at or before it).
    """
    rows = conn.execute(
        """
        select t.tick_id, t.tick_time, t.tick_event_seq
          from ferry_queue.tick t join ferry_queue.queue q on q.queue_id = t.tick_queue
         where q.queue_name = %s and t.tick_id >= %s
           and (%s::bigint is null or t.tick_id <= %s::bigint)
         order by t.tick_id
        """,
        (queue, after, upto, upto),
    ).fetchall()
    if not rows or rows[0][0] != after:
        raise QueueError(_gone(conn, queue, after))
    return [TickMark(*r) for r in rows]


def tick_spans(conn: psycopg.Connection, queue: str, start: int, end: int) -> list[TickSpan]:
    """The spans between consecutive ticks from ``start`` to ``end`` (``start`` <= ``end``;
    none when they are equal), each with the SELECT of its events.  Together they hold every
    event of ``(start, end]`` exactly once, whatever consumer moved since.  QueueError when
    the queue no longer holds tick ``start`` or does not hold ``end``."""
    if end < start:
        raise QueueError(f"tick {end} lies before tick {start} on queue {queue}")
    part = conn.execute(
        "select queue_id, queue_ntables from ferry_queue.queue where queue_name = %s", (queue,)
    ).fetchone()
    if part is None:
        raise QueueError(f"Unknown queue: {queue}")
    queue_id, ntables = part
    rows = conn.execute(
        """
        with t as (
            select tick_id, tick_time, tick_event_seq, tick_snapshot as cur,
                   lag(tick_id) over w as prev_id, lag(tick_snapshot) over w as prev,
                   lag(tick_event_seq) over w as prev_seq
              from ferry_queue.tick
             where tick_queue = %s and tick_id between %s and %s
            window w as (order by tick_id))
        select prev_id, tick_id, tick_time, tick_event_seq - prev_seq,
               pg_snapshot_xmax(prev)::text, pg_snapshot_xmax(cur)::text, cur::text,
               (select string_agg(x::text, ',' order by x) from pg_snapshot_xip(prev) x
                 where pg_visible_in_snapshot(x, cur))
          from t order by tick_id
        """,
        (queue_id, start, end),
    ).fetchall()
    if not rows or rows[0][1] != start:
        raise QueueError(_gone(conn, queue, start))
    if rows[-1][1] != end:
        raise QueueError(f"tick {end} not found on queue {queue}")
    parts = sql.SQL(", ").join(sql.Literal(queue_id * 10 + n) for n in range(ntables))
    return [
        TickSpan(prev_id, tick_id, tick_time, events, _span_query(parts, *bounds).as_string(conn))
        for prev_id, tick_id, tick_time, events, *bounds in rows[1:]
    ]


def _span_query(
    parts: sql.Composable, xmax_prev: str, xmax_cur: str, cur: str, xips: str | None
) -> sql.Composed:
    # Transactions running at the previous tick and finished by this one, and the txid range
    # [xmax(prev), xmax(cur)) visible at this one: what ferry_queue.batch_event_sql reads.
    # First deliveries only (ev_owner NULL): retried events belong to one batch consumer.
    late = (
        sql.SQL(" or ev_txid = any ({}::xid8[])").format(sql.Literal("{" + xips + "}"))
        if xips
        else sql.SQL("")
    )
    return sql.SQL(
        "select ev_id, ev_time, ev_txid::text::bigint as ev_txid, ev_retry, ev_type, ev_data,"
        " ev_extra1, ev_extra2, ev_extra3, ev_extra4"
        " from ferry_queue.event where ev_part in ({}) and ev_owner is null"
        " and ((ev_txid >= {}::xid8 and ev_txid < {}::xid8"
        " and pg_visible_in_snapshot(ev_txid, {}::pg_snapshot)){})"
    ).format(parts, sql.Literal(xmax_prev), sql.Literal(xmax_cur), sql.Literal(cur), late)


def events_after(conn: psycopg.Connection, queue: str, tick: int) -> sql.Composed:
    """A SELECT of the event columns of every committed event of ``queue`` after tick
    ``tick`` (ticked since or not yet), first deliveries only: the events a transaction
    invisible in the tick's snapshot queued.  QueueError when the queue lacks the tick."""
    row = conn.execute(
        """
        select q.queue_id, q.queue_ntables, t.tick_snapshot::text
          from ferry_queue.queue q
          join ferry_queue.tick t on t.tick_queue = q.queue_id and t.tick_id = %s
         where q.queue_name = %s
        """,
        (tick, queue),
    ).fetchone()
    if row is None:
        raise QueueError(_gone(conn, queue, tick))
    queue_id, ntables, snapshot = row
    parts = sql.SQL(", ").join(sql.Literal(queue_id * 10 + n) for n in range(ntables))
    return sql.SQL(
        "select ev_id, ev_time, ev_txid::text::bigint as ev_txid, ev_retry, ev_type, ev_data,"
        " ev_extra1, ev_extra2, ev_extra3, ev_extra4"
        " from ferry_queue.event where ev_part in ({}) and ev_owner is null"
        " and not pg_visible_in_snapshot(ev_txid, {}::pg_snapshot)"
    ).format(parts, sql.Literal(snapshot))


def move_consumer(conn: psycopg.Connection, queue: str, consumer: str, tick: int) -> bool:
    """Move ``consumer`` on to ``tick`` (never back): the queue may let go of what lies
    before it.  False when it already stood there or later."""
    row = conn.execute(
        "select ferry_queue.register_consumer_at(%s, %s, %s)"
        " from ferry_queue.get_consumer_info(%s, %s) where last_tick < %s",
        (queue, consumer, tick, queue, consumer, tick),
    ).fetchone()
    return row is not None


def _gone(conn: psycopg.Connection, queue: str, tick: int) -> str:
    row = conn.execute(
        "select min(t.tick_id) from ferry_queue.tick t"
        " join ferry_queue.queue q on q.queue_id = t.tick_queue where q.queue_name = %s",
        (queue,),
    ).fetchone()
    if row is None or row[0] is None:
        return f"Unknown queue: {queue}"
    if tick < row[0]:
        return (
            f"queue {queue} no longer holds tick {tick} (its oldest is {row[0]}):"
            " the events after it are gone"
        )
    return f"tick {tick} not found on queue {queue}"
