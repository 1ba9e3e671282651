"""Every call pgferry's Python code makes into ``ferry_queue`` about queues and their events.

Named functions over the SQL API (installation, queues, consumers, batches, events,
capture), so the node, apply, script and command code speak to the queue in Python and a
change of that part of the queue's SQL surface or tables touches only this file.
:class:`Batch` is the one description of an open batch.  Ticks, holds and the wait for a
tick are in :mod:`pgferry.queue.ticks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pgferry.errors import QueueError
from pgferry.events import EVENT_COLUMN_NAMES, EXECUTE_EVENT

# The ticker daemon listens here (force_tick notifies it too): a notification runs its round.
TICKER_WAKE_CHANNEL = "ferry_queue_ticker"


@dataclass(frozen=True)
class Batch:
    """An open batch: the events of one consumer between two ticks (prev_tick_id, tick_id]."""

    batch_id: int
    prev_tick_id: int | None
    tick_id: int
    tick_time: datetime | None
    prev_event_seq: int | None
    event_seq: int | None
    tick_snapshot: str | None  # snapshot of the closing tick (text form)
    queue_name: str
    consumer_name: str
    prev_tick_time: datetime | None
    prev_snapshot: str | None
    lag: timedelta | None  # age of the closing tick when the batch was described
    # Its event query (batch_event_sql, unordered), when read with the description.
    event_sql: str | None = field(default=None, compare=False, repr=False)


# --- installation, queues and consumers --------------------------------------------------
def installed(conn: psycopg.Connection) -> bool:
    """Whether the database has the queue schema at all."""
    row = conn.execute("select to_regnamespace('ferry_queue') is not null").fetchone()
    return bool(row and row[0])


def create_queue(conn: psycopg.Connection, queue: str) -> None:
    """Create ``queue`` with its first tick (nothing when it exists)."""
    conn.execute("select ferry_queue.create_queue(%s)", (queue,))


def drop_queue(conn: psycopg.Connection, queue: str, *, force: bool = False) -> None:
    """Drop ``queue`` with its events and ticks; ``force`` drops its consumers too."""
    conn.execute("select ferry_queue.drop_queue(%s, %s)", (queue, force))


def queue_exists(conn: psycopg.Connection, queue: str) -> bool:
    """Whether the database holds ``queue``."""
    row = conn.execute(
        "select exists (select 1 from ferry_queue.queue where queue_name = %s)", (queue,)
    ).fetchone()
    return bool(row and row[0])


def set_external_ticker(conn: psycopg.Connection, queue: str, external: bool = True) -> None:
    """A branch's queue is ticked by its worker, mirroring the provider's ticks; a root's
    (``external`` False) by its own ticker."""
    conn.execute(
        "select ferry_queue.set_queue_config(%s, 'external_ticker', %s)",
        (queue, "true" if external else "false"),
    )


def register_consumer(conn: psycopg.Connection, queue: str, consumer: str) -> bool:
    """Register ``consumer`` at the newest tick; False when it already was."""
    row = conn.execute("select ferry_queue.register_consumer(%s, %s)", (queue, consumer)).fetchone()
    return bool(row and row[0])


def unregister_consumer(conn: psycopg.Connection, queue: str, consumer: str) -> None:
    """Forget ``consumer`` and its pending retries (an error when it is not registered)."""
    conn.execute("select ferry_queue.unregister_consumer(%s, %s)", (queue, consumer))


def is_registered(conn: psycopg.Connection, queue: str, consumer: str) -> bool:
    """Whether ``consumer`` reads ``queue`` (no error for an unknown queue)."""
    row = conn.execute(
        """
        select exists (select 1 from ferry_queue.subscription s
                         join ferry_queue.queue q on q.queue_id = s.sub_queue
                        where q.queue_name = %s and s.sub_consumer = %s)
        """,
        (queue, consumer),
    ).fetchone()
    return bool(row and row[0])


def register_at(conn: psycopg.Connection, queue: str, consumer: str, tick: int) -> None:
    """Place ``consumer`` at ``tick`` whatever its position (the operator asked for it)."""
    conn.execute("select ferry_queue.register_consumer_at(%s, %s, %s)", (queue, consumer, tick))


def rewind(conn: psycopg.Connection, queue: str, consumer: str, tick: int) -> int:
    """Move ``consumer`` back (or on) to ``tick``, provided the queue still holds that tick
    and every event after it; returns the position it had.  QueueError when it does not."""
    try:
        with conn.transaction():
            row = conn.execute(
                "select ferry_queue.rewind_consumer(%s, %s, %s)", (queue, consumer, tick)
            ).fetchone()
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise QueueError(str(exc.diag.message_primary)) from None
    assert row is not None
    return row[0]


def queue_info(conn: psycopg.Connection, queue: str | None = None) -> list[dict[str, Any]]:
    """``ferry_queue.get_queue_info`` rows (every queue, or ``queue`` only) by column name."""
    with conn.cursor(row_factory=dict_row) as cur:
        if queue is None:
            cur.execute("select * from ferry_queue.get_queue_info()")
        else:
            cur.execute("select * from ferry_queue.get_queue_info(%s)", (queue,))
        return cur.fetchall()


def consumer_info(
    conn: psycopg.Connection, queue: str | None = None, consumer: str | None = None
) -> list[dict[str, Any]]:
    """``ferry_queue.get_consumer_info`` rows by column name: lag, last tick, open batch
    and pending events of each consumer (of ``queue``, or only ``consumer``)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute("select * from ferry_queue.get_consumer_info(%s, %s)", (queue, consumer))
        return cur.fetchall()


def consumer_last_tick(
    conn: psycopg.Connection, queue: str, consumer: str
) -> tuple[int | None, datetime | None]:
    """Id and time of the tick a consumer has completed (where its next batch starts)."""
    row = conn.execute(
        "select last_tick, now() - lag from ferry_queue.get_consumer_info(%s, %s)",
        (queue, consumer),
    ).fetchone()
    return (None, None) if row is None else (row[0], row[1])


def consumers(conn: psycopg.Connection, queue: str) -> list[str]:
    """Names of the consumers registered on ``queue``."""
    rows = conn.execute(
        "select consumer_name from ferry_queue.get_consumer_info(%s)", (queue,)
    ).fetchall()
    return [r[0] for r in rows]


# --- batches -----------------------------------------------------------------------------
def next_batch(
    conn: psycopg.Connection,
    queue: str,
    consumer: str,
    *,
    min_count: int | None,
) -> int | None:
    """Next batch id; with ``min_count`` one batch spanning ticks up to that many events.

    A consumer that is behind takes one large batch: a batch costs a fixed price (a Spark
    job, a transaction), and events of one key collapse within it.
    """
    if min_count:
        row = conn.execute(
            "select ferry_queue.next_batch_custom(%s, %s, null, %s, null)",
            (queue, consumer, min_count),
        ).fetchone()
        if row and row[0] is not None:
            return row[0]
    row = conn.execute("select ferry_queue.next_batch(%s, %s)", (queue, consumer)).fetchone()
    return None if row is None else row[0]


def next_batch_sized(
    conn: psycopg.Connection, queue: str, consumer: str, last_tick: int | None, most: int
) -> tuple[Batch | None, int]:
    """(next batch with its event query, ticks made after ``last_tick``), the batch chosen
    as :func:`next_batch` with ``min_count`` would be after a look at what waits: when more
    than one tick waits (the consumer is behind), one batch spanning them up to ``most``
    events; else the next tick's batch.

    One message of two statements (one round trip): the second describes the batch the
    first opened, found by the consumer's subscription (get_batch_info is STABLE: in the
    first statement it would not see the batch that statement opens).
    """
    params = {
        "q": sql.Literal(queue),
        "c": sql.Literal(consumer),
        "last": sql.Literal(last_tick),
        "most": sql.Literal(most),
    }
    take = sql.SQL(
        """
        select coalesce(
                 case when p.ticks > 1 then ferry_queue.next_batch_custom(
                     {q}, {c}, null, greatest(1, least(p.events, {most}))::integer, null)
                 end,
                 ferry_queue.next_batch({q}, {c})), p.ticks
          from (select count(*) - 1 as ticks,
                       coalesce(max(t.tick_event_seq) - min(t.tick_event_seq), 0) as events
                  from ferry_queue.tick t join ferry_queue.queue q on q.queue_id = t.tick_queue
                 where q.queue_name = {q} and t.tick_id >= {last}::bigint) p
        """
    ).format(**params)
    describe = sql.SQL(
        """
        select s.sub_batch, i.prev_tick_id, i.tick_id, i.batch_end, i.seq_start, i.seq_end,
               i.snapshot, i.queue_name, i.consumer_name, i.batch_start, i.prev_snapshot,
               i.lag, ferry_queue.batch_event_sql(s.sub_batch, false)
          from ferry_queue.subscription s
          join ferry_queue.queue q on q.queue_id = s.sub_queue
         cross join lateral ferry_queue.get_batch_info(s.sub_batch) i
         where q.queue_name = {q} and s.sub_consumer = {c} and s.sub_batch is not null
        """
    ).format(**params)
    with conn.cursor() as cur:
        cur.execute(sql.SQL("{}; {}").format(take, describe), prepare=False)
        taken = cur.fetchone()
        cur.nextset()
        info = cur.fetchone()
    if taken is None or taken[0] is None:
        return None, max(taken[1], 0) if taken else 0
    assert info is not None and info[0] == taken[0]
    return Batch(*info), max(taken[1], 0)


def next_batch_custom(
    conn: psycopg.Connection,
    queue: str,
    consumer: str,
    *,
    min_lag: timedelta | None = None,
    min_count: int | None = None,
    min_interval: timedelta | None = None,
) -> int | None:
    """Next batch id, only once it is big enough: its closing tick at least ``min_lag``
    old, and ``min_count`` events or ``min_interval`` long (None when no batch is)."""
    row = conn.execute(
        "select ferry_queue.next_batch_custom(%s, %s, %s, %s, %s)",
        (queue, consumer, min_lag, min_count, min_interval),
    ).fetchone()
    return None if row is None else row[0]


def next_batch_upto(
    conn: psycopg.Connection, queue: str, consumer: str, upto: int, min_count: int
) -> int | None:
    """Next batch of ``consumer`` ending at the first tick that closes ``min_count`` events
    or at tick ``upto``, never later (None when no tick after its position is <= upto)."""
    row = conn.execute(
        "select ferry_queue.next_batch_upto(%s, %s, %s, %s)", (queue, consumer, upto, min_count)
    ).fetchone()
    return None if row is None else row[0]


def batch_info(conn: psycopg.Connection, batch_id: int, *, event_sql: bool = False) -> Batch:
    """Describe open batch ``batch_id``; with ``event_sql`` its unordered event query too
    (:func:`batch_event_sql`, in the same round trip)."""
    row = conn.execute(
        """
        select prev_tick_id, tick_id, batch_end, seq_start, seq_end, snapshot,
               queue_name, consumer_name, batch_start, prev_snapshot, lag,
               case when %s then ferry_queue.batch_event_sql(%s, false) end
          from ferry_queue.get_batch_info(%s)
        """,
        (event_sql, batch_id, batch_id),
    ).fetchone()
    assert row is not None
    return Batch(batch_id, *row)


def batch_event_sql(conn: psycopg.Connection, batch_id: int, *, ordered: bool = False) -> str:
    """A SELECT of the batch's events that any connection can run unchanged.

    Unordered unless ``ordered``: replay wraps it in its own grouping and sorting, where an
    inner sort of the whole batch would be wasted work.
    """
    row = conn.execute("select ferry_queue.batch_event_sql(%s, %s)", (batch_id, ordered)).fetchone()
    assert row is not None
    return row[0]


def open_batch_cursor(
    conn: psycopg.Connection,
    batch_id: int,
    cursor_name: str,
    first_rows: int,
    extra_where: str | None = None,
) -> list[tuple]:
    """Open cursor ``cursor_name`` over the batch's events in ``ev_id`` order (filtered by
    the SQL condition ``extra_where``) and return its first ``first_rows`` rows; FETCH
    reads on in the same transaction.  Rows: ev_id, ev_time, ev_txid, ev_retry, ev_type,
    ev_data, ev_extra1 .. ev_extra4."""
    return conn.execute(
        "select * from ferry_queue.get_batch_cursor(%s, %s, %s, %s)",
        (batch_id, cursor_name, first_rows, extra_where),
    ).fetchall()


def event_retry(conn: psycopg.Connection, batch_id: int, ev_id: int, seconds: int) -> None:
    """Deliver event ``ev_id`` of the batch again, to its consumer only, ``seconds`` later."""
    conn.execute("select ferry_queue.event_retry(%s, %s, %s)", (batch_id, ev_id, seconds))


def finish_batch(conn: psycopg.Connection, batch_id: int) -> None:
    """Close the batch: its consumer's next batch starts at its closing tick."""
    conn.execute("select ferry_queue.finish_batch(%s)", (batch_id,))


def finish_batch_and_wake(conn: psycopg.Connection, batch_id: int) -> None:
    """:func:`finish_batch` and, in the same message, a notification that runs the ticker's
    round at once: the consumer now waits, so events waiting make a tick due (``tick_due``).
    The tick stays the ticker's (a stopped one still shows: ``node/ticker_health.py``)."""
    text = sql.SQL("select ferry_queue.finish_batch({}); select pg_notify({}, '')").format(
        sql.Literal(batch_id), sql.Literal(TICKER_WAKE_CHANNEL)
    )
    conn.execute(text, prepare=False)


def scripts(conn: psycopg.Connection, batch_sql: str) -> list[tuple]:
    """The batch's queued scripts (EXECUTE events) in order: barriers for replay.

    Rows: (ev_id, ev_data, ev_extra1, ev_extra2, ev_extra4).
    """
    query = sql.SQL(
        "select ev_id, ev_data, ev_extra1, ev_extra2, ev_extra4 from ({}) e"
        " where e.ev_type = {} order by e.ev_id"
    ).format(sql.SQL(batch_sql), sql.Literal(EXECUTE_EVENT))
    return conn.execute(query).fetchall()


def events_of_types(
    conn: psycopg.Connection, batch_sql: str, types: Sequence[str]
) -> list[tuple[int, str, str | None, str | None]]:
    """The batch's events of the given ``types`` in ev_id order, as rows
    ``(ev_id, ev_type, ev_extra1, ev_extra2)`` (rare events, read only when present)."""
    query = sql.SQL(
        "select ev_id, ev_type, ev_extra1, ev_extra2 from ({}) e"
        " where e.ev_type = any({}) order by e.ev_id"
    ).format(sql.SQL(batch_sql), sql.Literal(list(types)))
    return conn.execute(query).fetchall()


# --- events ------------------------------------------------------------------------------


def insert_event(
    conn: psycopg.Connection,
    queue: str,
    ev_type: str,
    data: str | None,
    extra1: str | None,
    extra2: str | None = None,
    extra3: str | None = None,
    extra4: str | None = None,
) -> None:
    """Queue one event (as the capture triggers do, from Python: scripts, sequences)."""
    conn.execute(
        "select ferry_queue.insert_event(%s, %s, %s, %s, %s, %s, %s)",
        (queue, ev_type, data, extra1, extra2, extra3, extra4),
    )


def insert_staged_events(conn: psycopg.Connection, queue: str, relation: sql.Composable) -> int:
    """Queue every row of ``relation`` (a table with ev_id, ev_type, ev_data and
    ev_extra1..4) as a new event of ``queue``, in ev_id order; returns how many."""
    cur = conn.execute(
        sql.SQL(
            "select ferry_queue.insert_event({}, ev_type, ev_data, ev_extra1, ev_extra2,"
            " ev_extra3, ev_extra4) from (select * from {} order by ev_id offset 0) as e"
        ).format(sql.Literal(queue), relation)
    )
    return cur.rowcount


# Columns of a provider's events that forward_events stores, in this order (the txid is
# the forwarding transaction's own).
FORWARDED_COLUMNS = tuple(c for c in EVENT_COLUMN_NAMES if c != "ev_txid")
# Events per call: each call sends its columns as arrays, one parameter each, which must
# stay well below the server's limit for one value even for large events.
_FORWARD_CHUNK = 5000


def forward_events(conn: psycopg.Connection, queue: str, rows: Sequence[Sequence[Any]]) -> int:
    """Store a provider's events (rows of ``FORWARDED_COLUMNS``, in ev_id order) in
    ``queue`` unchanged: same ev_id, time and retry count.  Returns how many."""
    done = 0
    for start in range(0, len(rows), _FORWARD_CHUNK):
        columns = [list(col) for col in zip(*rows[start : start + _FORWARD_CHUNK], strict=True)]
        row = conn.execute(
            """
            select ferry_queue.forward_events(%s, %s::bigint[], %s::timestamptz[],
                   %s::integer[], %s::text[], %s::text[], %s::text[], %s::text[],
                   %s::text[], %s::text[])
            """,
            (queue, *columns),
        ).fetchone()
        done += row[0] if row else 0
    return done


# --- capture -----------------------------------------------------------------------------
def attach_capture(conn: psycopg.Connection, queue: str, fq: str) -> None:
    """(Re)create the triggers that queue every row change and TRUNCATE of table ``fq``."""
    conn.execute("select ferry_queue.attach_capture(%s, %s::regclass, false)", (queue, fq))


def attach_capture_spec(conn: psycopg.Connection, queue: str, fq: str, spec: dict) -> str:
    """(Re)create the capture triggers of table ``fq`` as the capture ``spec`` says (the
    jsonb of :mod:`pgferry.node.capture_spec`); returns the row trigger's function."""
    row = conn.execute(
        "select ferry_queue.attach_capture_spec(%s, %s::regclass, %s)", (queue, fq, Jsonb(spec))
    ).fetchone()
    assert row is not None
    return row[0]


def detach_capture(conn: psycopg.Connection, queue: str, fq: str) -> None:
    """Drop the queue's triggers of table ``fq`` (capture or deny), if any."""
    conn.execute("select ferry_queue.detach_capture(%s, %s::regclass)", (queue, fq))
