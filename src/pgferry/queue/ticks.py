"""Ticks of a queue: making and reading them, the holds that keep them, waiting for them.

A tick closes a stretch of a queue's events; batches run from tick to tick.  Named
functions over the SQL API for everything about ticks themselves: the ticker's step and a
branch's copied ticks, reading where a queue stands (newest tick, a tick's time, marks,
what a consumer has pending), the holds that keep ticks and their events for a reader that
is not a consumer (:func:`set_hold`, :func:`tick_usable`) and :func:`cut_after`, and the
worker's idle wait for the next tick (:func:`batch_waiting`, :func:`wait_for_tick`).
Queues, consumers, events and capture are in :mod:`pgferry.queue.api`; a consumer's
batches in :mod:`pgferry.queue.batches`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql


# --- making and reading ticks ------------------------------------------------------------
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


def tick_range(conn: psycopg.Connection, queue: str) -> tuple[int | None, int | None]:
    """The oldest and newest tick ids ``queue`` holds (None, None: none)."""
    row = conn.execute(
        """
        select min(t.tick_id), max(t.tick_id)
          from ferry_queue.tick t join ferry_queue.queue q on q.queue_id = t.tick_queue
         where q.queue_name = %s
        """,
        (queue,),
    ).fetchone()
    return (None, None) if row is None else (row[0], row[1])


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


def late_events(conn: psycopg.Connection, queue: str, tick_id: int) -> int:
    """Events of ``queue`` committed by now that tick ``tick_id`` does not take (at most
    1,000 counted): those of a transaction that had taken its event ids but not committed
    when the tick was made, which come with the next tick (``ferry_queue.late_events``, the
    check the ticker makes too)."""
    row = conn.execute(
        """
        select l.events
          from ferry_queue.queue q
          join ferry_queue.tick t on t.tick_queue = q.queue_id
         cross join lateral ferry_queue.late_events(
                q.queue_id, t.tick_snapshot, pg_current_snapshot(), 1000, null) l
         where q.queue_name = %s and t.tick_id = %s
        """,
        (queue, tick_id),
    ).fetchone()
    return 0 if row is None else int(row[0])


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


def cut_after(conn: psycopg.Connection, queue: str, tick_id: int) -> list[tuple[Any, ...]]:
    """Cut ``queue`` back to ``tick_id`` in the caller's transaction: the events after it
    (ticked or not) and the later ticks are deleted; returns those events (rows of
    :data:`pgferry.events.EVENT_COLUMN_NAMES`, first deliveries, by ev_id).  New events wait
    for the commit."""
    return conn.execute("select * from ferry_queue.cut_after(%s, %s)", (queue, tick_id)).fetchall()


# --- waiting for a tick ------------------------------------------------------------------
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
