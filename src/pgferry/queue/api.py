"""Every call pgferry's Python code makes into the queue layer (``ferry_queue``).

Named functions over the SQL API (queues, consumers, ticks, batches, events, capture), so
the node, apply, script and command code speak to the queue in Python and a change of the
queue's SQL surface or tables touches only this file.  :class:`Batch` is the one
description of an open batch.  It is long because it is the whole seam: each function is a
thin wrapper, and splitting them across files would blur where the queue's API is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pgferry.errors import QueueError


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


# --- ticks -------------------------------------------------------------------------------
def last_tick(conn: psycopg.Connection, queue: str) -> tuple[int | None, datetime | None]:
    """Id and time of the newest tick of ``queue``."""
    row = conn.execute(
        "select last_tick_id, now() - ticker_lag from ferry_queue.get_queue_info(%s)", (queue,)
    ).fetchone()
    return (None, None) if row is None else (row[0], row[1])


def force_tick(conn: psycopg.Connection, queue: str) -> int | None:
    """Make the next tick of ``queue`` due whatever its load; returns the newest tick id."""
    row = conn.execute("select ferry_queue.force_tick(%s)", (queue,)).fetchone()
    return None if row is None else row[0]


def tick(conn: psycopg.Connection, queue: str) -> int | None:
    """Tick ``queue`` if a tick is due (the ticker's decision); the new tick id or None."""
    row = conn.execute("select ferry_queue.ticker(%s)", (queue,)).fetchone()
    return None if row is None else row[0]


def tick_if_own_ticker(conn: psycopg.Connection, queue: str) -> int | None:
    """:func:`tick`, but only for a queue that ticks itself now: a queue ticked from
    outside (a branch) or with its ticker paused is left alone instead of raising."""
    row = conn.execute(
        "select ferry_queue.ticker(queue_name) from ferry_queue.queue"
        " where queue_name = %s and not queue_external_ticker and not queue_ticker_paused",
        (queue,),
    ).fetchone()
    return None if row is None else row[0]


def external_tick(
    conn: psycopg.Connection,
    queue: str,
    tick_id: int,
    tick_time: datetime | None,
    event_seq: int,
) -> None:
    """A tick copied from the provider (same id, time and event position) on a queue with
    an external ticker."""
    conn.execute(
        "select ferry_queue.ticker(%s, %s, %s, %s)", (queue, tick_id, tick_time, event_seq)
    )


def tick_exists(conn: psycopg.Connection, queue: str, tick_id: int) -> bool:
    """Whether ``queue`` holds tick ``tick_id``."""
    return tick_time(conn, queue, tick_id) is not None


def tick_time(conn: psycopg.Connection, queue: str, tick_id: int) -> datetime | None:
    """When tick ``tick_id`` of ``queue`` was made; None when the queue does not hold it."""
    row = conn.execute(
        """
        select t.tick_time from ferry_queue.tick t
          join ferry_queue.queue q on q.queue_id = t.tick_queue
         where q.queue_name = %s and t.tick_id = %s
        """,
        (queue, tick_id),
    ).fetchone()
    return None if row is None else row[0]


def has_tick(conn: psycopg.Connection, queue: str, tick_id: int) -> tuple[bool, int | None]:
    """Whether the queue holds ``tick_id``, and its newest tick."""
    row = conn.execute(
        """
        select bool_or(t.tick_id = %s), max(t.tick_id)
          from ferry_queue.tick t join ferry_queue.queue q on q.queue_id = t.tick_queue
         where q.queue_name = %s
        """,
        (tick_id, queue),
    ).fetchone()
    return (bool(row and row[0]), row[1] if row else None)


def advance_tick_ids(conn: psycopg.Connection, queue: str, past: int) -> None:
    """New tick ids of ``queue`` continue after ``past`` and after every tick it holds."""
    conn.execute(
        """
        select setval(q.queue_tick_seq, greatest(%s, (select max(tick_id)
                      from ferry_queue.tick where tick_queue = q.queue_id)))
          from ferry_queue.queue q where q.queue_name = %s
        """,
        (past, queue),
    )


def pending(conn: psycopg.Connection, queue: str, last_tick: int | None) -> tuple[int, int]:
    """(ticks, events) made after ``last_tick`` on the provider."""
    if last_tick is None:
        return 0, 0
    row = conn.execute(
        """
        select count(*) - 1, coalesce(max(t.tick_event_seq) - min(t.tick_event_seq), 0)
          from ferry_queue.tick t join ferry_queue.queue q on q.queue_id = t.tick_queue
         where q.queue_name = %s and t.tick_id >= %s
        """,
        (queue, last_tick),
    ).fetchone()
    return (0, 0) if row is None else (max(row[0], 0), row[1])


def tick_marks(conn: psycopg.Connection, queue: str) -> dict[int, tuple[datetime, int]]:
    """Every tick of ``queue``: id -> (time, event position).  A branch copies both from
    its provider, so equal marks on two nodes are the same tick."""
    rows = conn.execute(
        """
        select t.tick_id, t.tick_time, t.tick_event_seq
          from ferry_queue.tick t join ferry_queue.queue q on q.queue_id = t.tick_queue
         where q.queue_name = %s
        """,
        (queue,),
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


# --- holds: positions that keep ticks and events without reading -------------------------
def tick_usable(conn: psycopg.Connection, queue: str, tick_id: int) -> bool:
    """Whether a reader may start at ``tick_id``: the queue holds it and every event after."""
    row = conn.execute("select ferry_queue.tick_usable(%s, %s)", (queue, tick_id)).fetchone()
    return bool(row and row[0])


def usable_ticks(conn: psycopg.Connection, queue: str) -> tuple[int | None, int | None]:
    """(oldest usable tick, newest tick) of ``queue``."""
    row = conn.execute("select * from ferry_queue.usable_ticks(%s)", (queue,)).fetchone()
    return (None, None) if row is None else (row[0], row[1])


def tick_standing(
    conn: psycopg.Connection, queue: str, tick_id: int
) -> tuple[bool, int | None, int | None]:
    """:func:`tick_usable` and :func:`usable_ticks` read at one instant: (usable, oldest
    usable tick, newest tick); a tick arriving between two reads cannot mislead."""
    row = conn.execute(
        "select ferry_queue.tick_usable(%s, %s), u.oldest, u.newest"
        " from ferry_queue.usable_ticks(%s) u",
        (queue, tick_id, queue),
    ).fetchone()
    return (False, None, None) if row is None else (bool(row[0]), row[1], row[2])


def set_hold(conn: psycopg.Connection, queue: str, name: str, tick_id: int) -> int | None:
    """Keep what a reader at ``tick_id`` needs, under the name ``name``; returns the tick
    the hold is at (the newest usable one at or before ``tick_id``, else the oldest)."""
    row = conn.execute("select ferry_queue.set_hold(%s, %s, %s)", (queue, name, tick_id)).fetchone()
    return None if row is None else row[0]


def drop_hold(conn: psycopg.Connection, queue: str, name: str) -> bool:
    """Remove hold ``name``; False when there was none."""
    row = conn.execute("select ferry_queue.drop_hold(%s, %s)", (queue, name)).fetchone()
    return bool(row and row[0])


# The columns of an event, in table order (also what :func:`cut_after` returns).
EVENT_COLUMNS = (
    "ev_id",
    "ev_time",
    "ev_txid",
    "ev_retry",
    "ev_type",
    "ev_data",
    "ev_extra1",
    "ev_extra2",
    "ev_extra3",
    "ev_extra4",
)


def cut_after(conn: psycopg.Connection, queue: str, tick_id: int) -> list[tuple]:
    """Cut ``queue`` back to ``tick_id`` in the caller's transaction: the events after it
    (ticked or not) and the later ticks are deleted; returns those events (rows of
    ``EVENT_COLUMNS``, first deliveries, by ev_id).  New events wait for the commit."""
    return conn.execute("select * from ferry_queue.cut_after(%s, %s)", (queue, tick_id)).fetchall()


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


def batch_info(conn: psycopg.Connection, batch_id: int) -> Batch:
    """Describe open batch ``batch_id``."""
    row = conn.execute(
        """
        select prev_tick_id, tick_id, batch_end, seq_start, seq_end, snapshot,
               queue_name, consumer_name, batch_start, prev_snapshot, lag
          from ferry_queue.get_batch_info(%s)
        """,
        (batch_id,),
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


def scripts(conn: psycopg.Connection, batch_sql: str) -> list[tuple]:
    """The batch's queued scripts (EXECUTE events) in order: barriers for replay.

    Rows: (ev_id, ev_data, ev_extra1, ev_extra2, ev_extra4).
    """
    query = (
        "select ev_id, ev_data, ev_extra1, ev_extra2, ev_extra4 from ("
        + batch_sql
        + ") e where e.ev_type = 'EXECUTE' order by e.ev_id"
    )
    return conn.execute(query.encode()).fetchall()


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
FORWARDED_COLUMNS = tuple(c for c in EVENT_COLUMNS if c != "ev_txid")
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


def consumers(conn: psycopg.Connection, queue: str) -> list[str]:
    """Names of the consumers registered on ``queue``."""
    rows = conn.execute(
        "select consumer_name from ferry_queue.get_consumer_info(%s)", (queue,)
    ).fetchall()
    return [r[0] for r in rows]


def next_batch_upto(
    conn: psycopg.Connection, queue: str, consumer: str, upto: int, min_count: int
) -> int | None:
    """Next batch of ``consumer`` ending at the first tick that closes ``min_count`` events
    or at tick ``upto``, never later (None when no tick after its position is <= upto)."""
    row = conn.execute(
        "select ferry_queue.next_batch_upto(%s, %s, %s, %s)", (queue, consumer, upto, min_count)
    ).fetchone()
    return None if row is None else row[0]


def events_of_types(
    conn: psycopg.Connection, batch_sql: str, types: Sequence[str]
) -> list[tuple[int, str, str | None, str | None]]:
    """The batch's events of the given ``types`` in ev_id order, as rows
    ``(ev_id, ev_type, ev_extra1, ev_extra2)`` (rare events, read only when present)."""
    from psycopg import sql

    query = sql.SQL(
        "select ev_id, ev_type, ev_extra1, ev_extra2 from ({}) e"
        " where e.ev_type = any({}) order by e.ev_id"
    ).format(sql.SQL(batch_sql), sql.Literal(list(types)))
    return conn.execute(query).fetchall()


def ticked_by_provider(conn: psycopg.Connection, queue: str) -> bool:
    """Whether ``queue`` mirrors its provider's ticks (a branch) instead of ticking itself."""
    row = conn.execute(
        "select queue_external_ticker from ferry_queue.queue where queue_name = %s", (queue,)
    ).fetchone()
    return bool(row and row[0])


TICK_CHANNEL = "ferry_queue_tick"  # notified with the queue's name at every tick


def batch_waiting(conn: psycopg.Connection, queue: str, consumer: str) -> bool:
    """Whether ``consumer`` has a batch to take on ``queue``: one open, or a tick past its
    position (True as well when it is not registered: taking a batch says why).  Read only:
    ``next_batch`` writes the consumer's row even when it finds nothing."""
    row = conn.execute(
        """
        select s.sub_batch is not null
               or exists (select 1 from ferry_queue.tick t
                           where t.tick_queue = s.sub_queue and t.tick_id > s.sub_last_tick)
          from ferry_queue.subscription s
          join ferry_queue.queue q on q.queue_id = s.sub_queue
         where q.queue_name = %s and s.sub_consumer = %s
        """,
        (queue, consumer),
    ).fetchone()
    return row is None or bool(row[0])


def listen_for_ticks(conn: psycopg.Connection) -> None:
    """Have ``conn`` (autocommit) receive a notification at every tick of its database."""
    conn.execute(sql.SQL("listen {}").format(sql.Identifier(TICK_CHANNEL)))


def wait_for_tick(conn: psycopg.Connection, queue: str, timeout: float) -> bool:
    """Wait at most ``timeout`` seconds for a tick of ``queue`` on a listening ``conn``;
    True when one came (or had come since the last wait)."""
    if not any(notify.payload == queue for notify in conn.notifies(timeout=timeout)):
        return False
    # Ticks announced meanwhile are covered by the batch about to be taken: forget them, or
    # each would wake the next wait for nothing.
    for _ in conn.notifies(timeout=0):
        pass
    return True
