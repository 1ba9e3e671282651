"""A consumer's batches on the queue: taking, describing, reading and finishing them.

Named functions over the batch part of ``ferry_queue``'s SQL API: taking the next batch
(plain, custom, up to a tick, or by a :class:`BatchRule`: every one ends at the tick
``ferry_queue.batch_tick`` chooses, the one rule of a batch's size, which
:func:`batch_tick` also answers before a batch is opened), describing it (:class:`Batch`,
the one description of an open batch, with its event query in both forms: every value
inlined, and :func:`generic_event_sql` with the :class:`EventRange` as parameters),
reading its events (a cursor; its rare events, queued scripts and removals, in one
query), retrying an event and finishing the batch, with or without waking the ticker.
Queues, consumers, events and capture are in :mod:`pgferry.queue.api`; ticks in
:mod:`pgferry.queue.ticks`.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg.rows import class_row

# The ticker daemon listens here (force_tick notifies it too): a notification runs its round.
TICKER_WAKE_CHANNEL = "ferry_queue_ticker"


# Sent first in a message whose commit need not wait for the WAL flush (see take_batch).
_NO_FLUSH = sql.SQL("select set_config('synchronous_commit', 'off', true)")


# get_batch_info's columns (as ``i``) in the order of Batch's fields after batch_id.
_INFO_COLUMNS = sql.SQL(
    "i.prev_tick_id, i.tick_id, i.batch_end, i.seq_start, i.seq_end, i.snapshot,"
    " i.queue_name, i.consumer_name, i.batch_start, i.prev_snapshot, i.lag"
)
# batch_range_args's range columns (as ``a``), as text: EventRange's fields.  Its
# event_sql, read beside them, is batch_event_sql's text from the same look-ups.
_RANGE_COLUMNS = sql.SQL(
    "a.queue_id, a.sub_id, a.prev_xmax::text, a.next_xmax::text, a.next_snapshot::text,"
    " a.running::text"
)

# The types of the generic event query's parameters $1 .. $6 (EventRange's fields).
EVENT_RANGE_TYPES = ("integer", "integer", "xid8", "xid8", "pg_snapshot", "xid8[]")


@dataclass(frozen=True)
class EventRange:
    """The values that fix which events lie between two ticks for a consumer
    (``ferry_queue.tick_range_args``): the parameters of :func:`generic_event_sql`, in the
    order of :data:`EVENT_RANGE_TYPES`.  Values in their text forms."""

    queue_id: int
    sub_id: int
    prev_xmax: str  # xmax of the opening tick's snapshot
    next_xmax: str  # xmax of the closing tick's snapshot
    next_snapshot: str  # the closing tick's snapshot
    running: str  # transactions running at the opening tick that the closing one sees

    def args(self) -> tuple[int, int, str, str, str, str]:
        return (
            self.queue_id, self.sub_id, self.prev_xmax, self.next_xmax, self.next_snapshot,
            self.running,
        )  # fmt: skip


def _event_range(row: Sequence[Any]) -> EventRange | None:
    return None if row[0] is None else EventRange(*row)


# Per connection, the generic event query its server gives (the text of its installed
# event_range_sql: read once per session).
_GENERIC: weakref.WeakKeyDictionary[psycopg.Connection, str] = weakref.WeakKeyDictionary()


def generic_event_sql(conn: psycopg.Connection) -> str:
    """The unordered event query of any tick range with the range's values as parameters
    ``$1 .. $6`` (:class:`EventRange`, :data:`EVENT_RANGE_TYPES`): the same text for every
    batch, so that a read composed on it is prepared once per session and runs with a
    generic plan.  :func:`batch_event_sql` is the same query with the values inlined."""
    text = _GENERIC.get(conn)
    if text is None:
        row = conn.execute(
            "select ferry_queue.event_range_sql(false, '$1', '$2', '$3', '$4', '$5', '$6')",
            prepare=False,
        ).fetchone()
        assert row is not None
        text = _GENERIC[conn] = row[0]
    return text


@dataclass(frozen=True, kw_only=True)
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
    # The values of its range (generic_event_sql's parameters), read with event_sql.
    events: EventRange | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class BatchRule:
    """How far a consumer's next batch reaches (``ferry_queue.batch_tick``).

    ``most``: when several ticks wait (the consumer is behind), one batch spanning them up
    to that many events.  ``min_lag``: only ticks at least that old (``pgq_keep_lag``).
    ``min_interval``: each batch spans at least that long (``pgq_batch_collect_interval``).
    ``one_tick``: the batch ends at the next tick (whoever waits for the consumer at a
    given tick), whatever else is set but ``min_lag``.
    """

    most: int | None = None
    min_lag: timedelta | None = None
    min_interval: timedelta | None = None
    one_tick: bool = False

    def args(self) -> tuple[timedelta | None, int | None, timedelta | None, bool]:
        """batch_tick's (i_min_lag, i_min_count, i_min_interval, i_sized)."""
        if self.one_tick:
            return self.min_lag, None, None, False
        if self.min_interval:
            return self.min_lag, None, self.min_interval, False
        return self.min_lag, self.most, None, self.most is not None


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
            chosen: int = row[0]
            return chosen
    row = conn.execute("select ferry_queue.next_batch(%s, %s)", (queue, consumer)).fetchone()
    found: int | None = None if row is None else row[0]
    return found


def take_batch(
    conn: psycopg.Connection,
    queue: str,
    consumer: str,
    rule: BatchRule,
    *,
    flush: bool = True,
) -> tuple[Batch | None, int]:
    """(the consumer's next batch, ending where ``rule`` says, with its event query in
    both forms; the ticks waiting after the consumer's position), or the batch it has
    open.

    One message of two statements (one round trip): the second describes the batch the
    first opened, found by the consumer's subscription (get_batch_info is STABLE: in the
    first statement it would not see the batch that statement opens).

    ``flush=False``: the opening commits without waiting for the provider's WAL flush, for
    a consumer whose own database records the batches it applied (replay's worker).  A
    provider crash can lose it only together with everything written after it (a later
    durable commit flushes the WAL up to itself); the consumer then finds its position
    where it was and its own record says what was applied (docs/replication.md).
    """
    min_lag, min_count, min_interval, sized = rule.args()
    params = {"q": sql.Literal(queue), "c": sql.Literal(consumer)}
    # The description is prepared once per session (in the message that first runs it).
    take = sql.SQL(
        "select c.batch_id, c.waiting from ferry_queue.next_batch_chosen("
        "{q}, {c}, {lag}::interval, {count}::integer, {interval}::interval, null, {sized}) c"
    ).format(
        lag=sql.Literal(min_lag),
        count=sql.Literal(min_count),
        interval=sql.Literal(min_interval),
        sized=sql.Literal(sized),
        **params,
    )
    name, describe = _description(queue, consumer)
    known = _DESCRIBED.setdefault(conn, set())
    statements = [take]
    if name not in known:
        statements.append(sql.SQL("prepare {} as ").format(sql.Identifier(name)) + describe)
    statements.append(sql.SQL("execute {}").format(sql.Identifier(name)))
    rows: list[tuple[Any, ...] | None] = []
    try:
        with conn.cursor() as cur:
            cur.execute(_message(statements, flush), prepare=False)
            while True:  # the set_config's (without flush), the opening's, the description's
                if cur.pgresult is not None and cur.pgresult.status == ExecStatus.TUPLES_OK:
                    rows.append(cur.fetchone())
                if not cur.nextset():
                    break
    except BaseException:
        _described_again(conn, name)
        raise
    known.add(name)
    taken, info = rows[-2], rows[-1]
    waiting = taken[1] if taken else 0
    if taken is None or taken[0] is None:
        return None, waiting
    assert info is not None and info[0] == taken[0]
    return _batch_of_row(info), waiting


# Per connection, the consumers' descriptions prepared on its session: a constant text
# per consumer, planned once instead of at every batch.
_DESCRIBED: weakref.WeakKeyDictionary[psycopg.Connection, set[str]] = weakref.WeakKeyDictionary()


@functools.lru_cache(maxsize=64)
def _description(queue: str, consumer: str) -> tuple[str, sql.Composable]:
    """(statement name, SELECT) of the description of ``consumer``'s open batch: the
    batch id, :data:`_INFO_COLUMNS`, its event query and :data:`_RANGE_COLUMNS`, found by
    the consumer's subscription."""
    describe = sql.SQL(
        """
        select s.sub_batch, {info}, a.event_sql, {range}
          from ferry_queue.subscription s
          join ferry_queue.queue q on q.queue_id = s.sub_queue
         cross join lateral ferry_queue.get_batch_info(s.sub_batch) i
         cross join lateral ferry_queue.batch_range_args(s.sub_batch) a
         where q.queue_name = {q} and s.sub_consumer = {c} and s.sub_batch is not null
        """
    ).format(
        info=_INFO_COLUMNS, range=_RANGE_COLUMNS, q=sql.Literal(queue), c=sql.Literal(consumer)
    )
    text = describe.as_string(None)
    return "pgferry_batch_" + hashlib.sha1(text.encode()).hexdigest()[:24], sql.SQL(text)


def _described_again(conn: psycopg.Connection, name: str) -> None:
    """After a failed opening: whether the session holds the description is read again
    (its PREPARE may or may not have run)."""
    known = _DESCRIBED.pop(conn, None)
    if conn.broken or conn.info.transaction_status != TransactionStatus.IDLE:
        return
    row = conn.execute("select 1 from pg_prepared_statements where name = %s", (name,)).fetchone()
    known = known or set()
    known.discard(name)
    if row is not None:
        known.add(name)
    _DESCRIBED[conn] = known


# get_batch_info's columns (as ``i``, in _INFO_COLUMNS's order) -> Batch's fields.
_INFO_FIELDS = {
    "prev_tick_id": "prev_tick_id",
    "tick_id": "tick_id",
    "batch_end": "tick_time",
    "seq_start": "prev_event_seq",
    "seq_end": "event_seq",
    "snapshot": "tick_snapshot",
    "queue_name": "queue_name",
    "consumer_name": "consumer_name",
    "batch_start": "prev_tick_time",
    "prev_snapshot": "prev_snapshot",
    "lag": "lag",
}


def _batch(
    batch_id: int,
    info: Mapping[str, Any],
    event_sql: str | None,
    events: EventRange | None = None,
) -> Batch:
    """A Batch from get_batch_info's row read by name (a ``dict_row``, or the columns of
    :data:`_INFO_COLUMNS` named)."""
    return Batch(
        batch_id=batch_id,
        event_sql=event_sql,
        events=events,
        **{name: info[column] for column, name in _INFO_FIELDS.items()},
    )


def _info(values: Sequence[Any]) -> dict[str, Any]:
    """The values of :data:`_INFO_COLUMNS`, in its order, by column name."""
    return dict(zip(_INFO_FIELDS, values, strict=True))


def _batch_of_row(row: Sequence[Any]) -> Batch:
    """A Batch from a row of batch id, :data:`_INFO_COLUMNS`, the event query and
    :data:`_RANGE_COLUMNS`."""
    return _batch(row[0], _info(row[1:12]), row[12], _event_range(row[13:]))


def batch_tick(
    conn: psycopg.Connection, queue: str, after: int, rule: BatchRule
) -> tuple[int, int] | None:
    """(closing tick, events) of the batch after tick ``after`` as ``rule`` cuts it, the
    tick a batch opened now would end at; None when there is no such tick (yet)."""
    min_lag, min_count, min_interval, sized = rule.args()
    row = conn.execute(
        "select b.tick_id, b.events from ferry_queue.queue q"
        " cross join lateral ferry_queue.batch_tick(q.queue_id, %s, %s, %s, %s, null, %s) b"
        " where q.queue_name = %s",
        (after, min_lag, min_count, min_interval, sized, queue),
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return row[0], row[1]


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
    """Describe open batch ``batch_id``; with ``event_sql`` its event query too, in both
    forms (:func:`batch_event_sql` unordered and its :class:`EventRange`), in the same
    round trip."""
    if not event_sql:
        info = sql.SQL("select {info} from ferry_queue.get_batch_info(%s) as i")
        row = conn.execute(info.format(info=_INFO_COLUMNS), (batch_id,)).fetchone()
        assert row is not None
        return _batch(batch_id, _info(row), None)
    query = sql.SQL(
        "select %s::bigint, {info}, a.event_sql, {range}"
        " from ferry_queue.get_batch_info(%s) as i, ferry_queue.batch_range_args(%s) as a"
    ).format(info=_INFO_COLUMNS, range=_RANGE_COLUMNS)
    row = conn.execute(query, (batch_id, batch_id, batch_id)).fetchone()
    assert row is not None
    return _batch_of_row(row)


def tick_range_event_sql(
    conn: psycopg.Connection, queue: str, consumer: str, prev: int, tick: int
) -> str | None:
    """The event query of ``consumer``'s batch (``prev``, ``tick``] before it is opened:
    the very text :func:`batch_event_sql` gives once it is (both are
    ``ferry_queue.tick_range_sql``); None when the queue or consumer is not there."""
    row = conn.execute(
        "select ferry_queue.tick_range_sql(q.queue_id, s.sub_id, %s, %s, false)"
        " from ferry_queue.queue q"
        " join ferry_queue.subscription s on s.sub_queue = q.queue_id"
        " where q.queue_name = %s and s.sub_consumer = %s",
        (prev, tick, queue, consumer),
    ).fetchone()
    return None if row is None else row[0]


def batch_event_sql(conn: psycopg.Connection, batch_id: int, *, ordered: bool = False) -> str:
    """A SELECT of the batch's events that any connection can run unchanged.

    Unordered unless ``ordered``: replay wraps it in its own grouping and sorting, where an
    inner sort of the whole batch would be wasted work.
    """
    row = conn.execute("select ferry_queue.batch_event_sql(%s, %s)", (batch_id, ordered)).fetchone()
    assert row is not None
    text: str = row[0]
    return text


def open_batch_cursor(
    conn: psycopg.Connection,
    batch_id: int,
    cursor_name: str,
    first_rows: int,
    extra_where: str | None = None,
) -> list[tuple[Any, ...]]:
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


def finish_batch(conn: psycopg.Connection, batch_id: int, *, flush: bool = True) -> None:
    """Close the batch: its consumer's next batch starts at its closing tick.  ``flush``:
    as in :func:`take_batch`."""
    _send(conn, [_finish(batch_id)], flush)


def finish_batch_and_wake(conn: psycopg.Connection, batch_id: int, *, flush: bool = True) -> None:
    """:func:`finish_batch` and, in the same message, a notification that runs the ticker's
    round at once: the consumer now waits, so events waiting make a tick due (``tick_due``).
    The tick stays the ticker's (a stopped one still shows: ``node/ticker_health.py``)."""
    wake = sql.SQL("select pg_notify({}, '')").format(sql.Literal(TICKER_WAKE_CHANNEL))
    _send(conn, [_finish(batch_id), wake], flush)


def _finish(batch_id: int) -> sql.Composable:
    return sql.SQL("select ferry_queue.finish_batch({})").format(sql.Literal(batch_id))


def _send(conn: psycopg.Connection, statements: Sequence[sql.Composable], flush: bool) -> None:
    conn.execute(_message(statements, flush), prepare=False)


def _message(statements: Sequence[sql.Composable], flush: bool) -> sql.Composed:
    """``statements`` as one message (one transaction in autocommit), committed without
    waiting for the WAL flush unless ``flush``."""
    return sql.SQL("; ").join(statements if flush else [_NO_FLUSH, *statements])


@dataclass(frozen=True)
class RareEvent:
    """One of a batch's rare events (:func:`rare_events`): a queued script or a removal."""

    ev_id: int
    ev_type: str
    ev_data: str | None
    ev_extra1: str | None
    ev_extra2: str | None
    ev_extra4: str | None


def rare_events(conn: psycopg.Connection, batch_sql: str, types: Sequence[str]) -> list[RareEvent]:
    """The batch's events of the given ``types`` in ev_id order, every kind in one query
    (rare events, read only when the batch's summary counted some: queued scripts are
    barriers for replay, removals of tables and sequences)."""
    query = sql.SQL(
        "select ev_id, ev_type, ev_data, ev_extra1, ev_extra2, ev_extra4 from ({}) e"
        " where e.ev_type = any({}) order by e.ev_id"
    ).format(sql.SQL(batch_sql), sql.Literal(list(types)))
    with conn.cursor(row_factory=class_row(RareEvent)) as cur:
        return cur.execute(query).fetchall()
