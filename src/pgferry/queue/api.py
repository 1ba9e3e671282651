"""Every call pgferry's Python code makes into ``ferry_queue`` about queues and their events.

Named functions over the SQL API (installation, queues, consumers, events, capture), so
the node, apply, script and command code speak to the queue in Python and a change of
that part of the queue's SQL surface or tables touches only this file.  A consumer's
batches (taking, describing, reading and finishing them) are in
:mod:`pgferry.queue.batches`; ticks, holds and the wait for a tick in
:mod:`pgferry.queue.ticks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pgferry.errors import QueueError
from pgferry.events import EVENT_COLUMN_NAMES


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
    had: int = row[0]
    return had


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


def consumers_past(conn: psycopg.Connection, queue: str, tick: int) -> list[str]:
    """The consumers of ``queue`` that stand past ``tick`` or hold a batch open that ends
    past it, their rows locked (caller's transaction): a batch opened meanwhile is seen.
    Read from the subscriptions themselves: a consumer whose tick is gone counts too."""
    rows = conn.execute(
        """
        select s.sub_consumer from ferry_queue.subscription s
          join ferry_queue.queue q on q.queue_id = s.sub_queue
         where q.queue_name = %s and (s.sub_last_tick > %s or s.sub_next_tick > %s)
         order by s.sub_consumer
           for update of s
        """,
        (queue, tick, tick),
    ).fetchall()
    return [r[0] for r in rows]


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
    """Queue one event (as the capture triggers do, from Python: scripts, sequences).

    Only the queue's owner may: ``ferry_queue.insert_event`` is closed to PUBLIC and runs
    with the caller's rights, so that no other role queues an event (an ``EXECUTE`` event
    runs on every subscriber)."""
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


def attach_capture_spec(conn: psycopg.Connection, queue: str, fq: str, spec: dict[str, Any]) -> str:
    """(Re)create the capture triggers of table ``fq`` as the capture ``spec`` says (the
    jsonb of :mod:`pgferry.registry.capture_spec`); returns the row trigger's function."""
    row = conn.execute(
        "select ferry_queue.attach_capture_spec(%s, %s::regclass, %s)", (queue, fq, Jsonb(spec))
    ).fetchone()
    assert row is not None
    function: str = row[0]
    return function


def detach_capture(conn: psycopg.Connection, queue: str, fq: str) -> None:
    """Drop the queue's triggers of table ``fq`` (capture or deny), if any."""
    conn.execute("select ferry_queue.detach_capture(%s, %s::regclass)", (queue, fq))
