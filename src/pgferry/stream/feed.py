"""The change feed's work on PostgreSQL, without PySpark: options, the consumer, planning
micro-batches in ticks, and reading one partition's events as rows.

:class:`Feed` runs on Spark's driver (one per streaming query, in the process that plans
its micro-batches) and holds the provider connection.  The read side,
:func:`read_chunks`, runs on an executor with plain values only: the provider's connection
string and the :class:`Span` items of its partition.  Offsets are ticks, by id and the
provider's time of the tick (:meth:`Feed.offset`); a query restarted from its checkpoint
reads on only from the very tick it stopped at (:meth:`Feed.check`: a provider that failed
over to a standby lacking that tick makes another under the same id).  The queue's
consumer stands at the last tick Spark has committed, so every tick range Spark can ask
for again after a crash is still held by the queue (:mod:`pgferry.queue.ranges`).  A
snapshot query's first batch reads the tables in a snapshot the driver holds, exported
with the tick made for it (:meth:`Feed.take_snapshot`, the way of :mod:`pgferry.sync.point`),
as :mod:`.snapshot` plans; the typed feed's columns are :mod:`.typed`'s, and the tables'
names as events give them :mod:`.names`'.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
from psycopg import sql

from pgferry.db import connect, describe, error_text, reconnect
from pgferry.errors import (
    ConfigError,
    DatabaseError,
    DivergedProvider,
    PgferryError,
    QueueError,
)
from pgferry.events import EXECUTE_EVENT
from pgferry.node import model
from pgferry.queue import api as queue_api
from pgferry.queue import ranges
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import entries
from pgferry.scripts.attrs import ScriptAttrs
from pgferry.scripts.translate import ScriptTranslateError, statements_naming
from pgferry.stream import names, snapshot, typed
from pgferry.stream.snapshot import TableSnapshot
from pgferry.sync import point

# Event positions per partition: one Spark task reads about this many events.
DEFAULT_PARTITION_EVENTS = 50_000
# Rows per round trip of an executor's cursor.
FETCH_ROWS = 5_000

# Columns of a row of the feed, in order (the source's schema names their types).
COLUMNS = (
    "tick_id",
    "ev_id",
    "table",
    "op",
    "data",
    "key",
    "committed_at",
    "ev_time",
    "old_data",
)


@dataclass(frozen=True)
class FeedOptions:
    """The source's options, checked."""

    provider: str
    queue: str
    consumer: str
    tables: tuple[str, ...]  # as given; empty: every table
    max_events: int | None  # maxEventsPerTrigger
    partition_events: int
    ddl: bool = True  # queued scripts as op S rows
    typed: bool = False  # data and old_data as the table's columns (one table)
    snapshot: bool = False  # a new query starts with the tables' rows at a tick


@dataclass(frozen=True)
class Span:
    """The events of ``(prev_tick, tick]`` as one SELECT (``queue.ranges.TickSpan``), or
    of a tick too large for one task, the piece ``ev_id % pieces = piece`` of them."""

    tick: int
    tick_time: datetime
    query: str
    piece: int = 0
    pieces: int = 1


def parse_options(options: Mapping[str, str]) -> FeedOptions:
    """Check the options Spark passed (case-insensitive keys); ConfigError names the first
    missing or malformed one."""
    opts = {k.lower(): v for k, v in options.items()}
    missing = [k for k in ("provider", "queue", "consumer") if not (opts.get(k) or "").strip()]
    if missing:
        raise ConfigError(f"pgferry change feed: option {missing[0]!r} is required")
    tables = tuple(t.strip() for t in (opts.get("tables") or "").split(",") if t.strip())
    if _boolean(opts, "typed", False) and len(tables) != 1:
        raise ConfigError("pgferry change feed: option typed needs option tables to name one table")
    return FeedOptions(
        provider=opts["provider"],
        queue=opts["queue"].strip(),
        consumer=opts["consumer"].strip(),
        tables=tables,
        max_events=_positive(opts, "maxeventspertrigger", "maxEventsPerTrigger"),
        partition_events=_positive(opts, "partitionevents", "partitionEvents")
        or DEFAULT_PARTITION_EVENTS,
        ddl=_boolean(opts, "ddl", True),
        typed=_boolean(opts, "typed", False),
        snapshot=_boolean(opts, "snapshot", False),
    )


def _boolean(opts: Mapping[str, str], key: str, default: bool) -> bool:
    value = (opts.get(key) or "").strip().lower()
    if not value:
        return default
    if value not in ("true", "false"):
        raise ConfigError(f"pgferry change feed: option {key} must be true or false")
    return value == "true"


def _positive(opts: Mapping[str, str], key: str, name: str) -> int | None:
    value = opts.get(key)
    if value is None or value.strip() == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"pgferry change feed: option {name} must be a positive integer")
    return number


class Feed:
    """The driver's side of one streaming query: the consumer and the plan of each batch."""

    def __init__(self, options: FeedOptions) -> None:
        self.options = options
        self._conn: psycopg.Connection | None = None
        self.tables: tuple[str, ...] = ()  # quoted schema.table names, as events carry them
        # The open transaction whose snapshot a new query's first batch reads, its id and
        # tick, held until Spark is done with that batch.
        self._held = contextlib.ExitStack()
        self._snapshot: tuple[str, int] | None = None

    # --- opening -------------------------------------------------------------------------
    def open(self, *, again: bool = False) -> None:
        """Connect, check the queue, register the consumer on first use, resolve tables.
        ``again``: the connection was lost; a provider named by several servers is given
        :data:`pgferry.db.FAILOVER_WAIT` to offer its new primary."""
        if self._conn is not None and not self._conn.closed:
            return
        opts = self.options
        how = reconnect if again else connect
        try:
            conn = how(opts.provider, autocommit=True, application_name="pgferry-changefeed")
        except DatabaseError as exc:
            raise DatabaseError(f"pgferry change feed: {exc}") from None
        try:
            self._check(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _check(self, conn: psycopg.Connection) -> None:
        opts = self.options
        where = describe(opts.provider)
        try:
            if not queue_api.installed(conn) or not queue_api.queue_exists(conn, opts.queue):
                raise QueueError(f"pgferry change feed: no queue {opts.queue!r} on {where}")
            taken = _cascade_consumer(conn, opts.queue, opts.consumer)
            if taken:
                raise QueueError(
                    f"pgferry change feed: consumer {opts.consumer!r} of queue {opts.queue!r}"
                    f" on {where} is {taken}; a change feed needs a consumer of its own"
                )
            # Tables first: a query refused for its options registers nothing.
            self.tables = tuple(names.quoted_table(conn, name) for name in opts.tables)
            _check_tables(conn, opts.queue, self.tables, where)
            queue_api.register_consumer(conn, opts.queue, opts.consumer)
        except psycopg.Error as exc:
            raise DatabaseError(f"pgferry change feed: {where}: {error_text(exc)}") from None

    def _db(self) -> psycopg.Connection:
        self.open()
        assert self._conn is not None
        return self._conn

    def _call(self, what, *args):
        """``what(conn, *args)``; a lost connection is opened once more, a database error
        becomes one line naming the provider."""
        for attempt in (1, 2):
            conn = self._db()
            try:
                return what(conn, *args)
            except psycopg.OperationalError as exc:
                if attempt == 2 or not conn.closed and not conn.broken:
                    raise DatabaseError(self._where(exc)) from None
                self._conn = None
                self.open(again=True)
            except psycopg.Error as exc:
                raise DatabaseError(self._where(exc)) from None
        raise AssertionError("unreachable")

    def _where(self, exc: BaseException) -> str:
        return f"pgferry change feed: {describe(self.options.provider)}: {error_text(exc)}"

    # --- offsets -------------------------------------------------------------------------
    def position(self) -> int:
        """The consumer's tick: where a new query starts."""

        def read(conn: psycopg.Connection) -> int:
            tick, _ = queue_api.consumer_last_tick(conn, self.options.queue, self.options.consumer)
            if tick is None:
                raise QueueError(
                    f"pgferry change feed: consumer {self.options.consumer!r} is not"
                    f" registered on queue {self.options.queue!r}"
                )
            return tick

        return self._call(read)

    def offset(self, tick: int) -> dict:
        """Spark's offset of ``tick``: its id and the provider's time of it, which tells that
        tick from another the provider may make under the same id after a failover."""
        made = self._call(queue_ticks.tick_time, self.options.queue, tick)
        if made is None:
            return {"tick": tick}
        # In UTC: the same tick gives the same offset text whatever the session's zone.
        return {"tick": tick, "time": made.astimezone(UTC).isoformat()}

    def check(self, offset: Mapping) -> int:
        """The tick of a Spark offset, once the provider is known to hold that very tick:
        DivergedProvider when its tick of that id was made at another time, or when it holds
        older ticks but none of that id (a standby promoted without the ticks this query
        read).  An offset without a time (written before times were recorded) is trusted;
        a tick rotated away is left for the reads to report."""
        tick = int(offset["tick"])
        if offset.get("time") is None:
            return tick
        recorded = datetime.fromisoformat(str(offset["time"]))
        queue = self.options.queue
        made = self._call(queue_ticks.tick_time, queue, tick)
        if made is not None:
            if made == recorded:
                return tick
            found = f"its tick {tick} was made at {made}"
        else:
            oldest, newest = self._call(queue_ticks.tick_range, queue)
            if oldest is None or oldest > tick:
                return tick
            found = f"it holds ticks {oldest} to {newest} and never made tick {tick}"
        raise DivergedProvider(
            f"pgferry change feed: diverged provider {describe(self.options.provider)}: the"
            f" query read up to tick {tick} made at {recorded}, but {found}: the provider lost"
            " ticks the query read (failover to a standby that lacked them); start the query"
            " with a new checkpoint (docs/failover.md)"
        )

    def newest(self) -> int:
        """The queue's newest tick."""
        return self._call(lambda conn: _newest(conn, self.options.queue))

    def latest(self, start: int, max_events: int | None, upto: int | None) -> int:
        """The end of the next micro-batch from ``start``: the newest tick (never past
        ``upto``), or with ``max_events`` the last tick keeping the batch within that many
        event positions; always at least one tick when there is one."""

        def plan(conn: psycopg.Connection) -> int:
            marks = ranges.tick_marks_after(conn, self.options.queue, start, upto)
            if max_events is None or len(marks) == 1:
                return marks[-1].tick_id
            end = marks[1].tick_id
            for mark in marks[2:]:
                if mark.event_seq - marks[0].event_seq > max_events:
                    break
                end = mark.tick_id
            return end

        return self._call(plan)

    def partitions(self, start: int, end: int) -> list[tuple[Span, ...]]:
        """The spans of ``(start, end]`` cut into partitions of about
        ``partition_events`` event positions each, in tick order."""
        spans = self._call(ranges.tick_spans, self.options.queue, start, end)
        most = self.options.partition_events
        parts: list[tuple[Span, ...]] = []
        current: list[Span] = []
        size = 0
        for span in spans:
            if span.events > most:
                # One large transaction is one tick: its pieces are read by tasks of their own.
                pieces = -(-span.events // most)
                parts += [
                    (Span(span.tick, span.tick_time, span.query, n, pieces),) for n in range(pieces)
                ]
                continue
            if current and size + span.events > most:
                parts.append(tuple(current))
                current, size = [], 0
            current.append(Span(span.tick, span.tick_time, span.query))
            size += max(span.events, 0)
        if current:
            parts.append(tuple(current))
        return parts

    # --- the initial snapshot -----------------------------------------------------------
    def take_snapshot(self) -> int:
        """Make a tick whose snapshot is that of a transaction held open here (the copy's
        and compare's way: ``ferry.sync_tick``), move the consumer to it, and return it:
        the tables' rows in that snapshot and the events after the tick are each change
        exactly once."""
        opts = self.options
        external = self._call(queue_ticks.ticked_by_provider, opts.queue)
        if external:
            raise QueueError(
                f"pgferry change feed: option snapshot needs the root: queue {opts.queue!r} on"
                f" {describe(opts.provider)} is ticked by its provider, no tick can be made here"
            )
        try:
            snapshot_id, tick = self._held.enter_context(
                point.source_snapshot(opts.provider, opts.queue, 0.0)
            )
        except PgferryError as exc:
            raise QueueError(
                f"pgferry change feed: option snapshot: {describe(opts.provider)}: {exc}"
            ) from None
        self._snapshot = (snapshot_id, tick)
        self._call(ranges.move_consumer, opts.queue, opts.consumer, tick)
        return tick

    def snapshot_reads(self, tick: int) -> list[TableSnapshot]:
        """The reads of the snapshot of ``tick`` taken by :meth:`take_snapshot`, one per
        table; QueueError when this process no longer holds it (Spark restarted before the
        first batch was done: the rows of that snapshot cannot be read again)."""
        if self._snapshot is None or self._snapshot[1] != tick:
            raise QueueError(
                f"pgferry change feed: the snapshot of tick {tick} is gone (the query stopped"
                " before its first batch was done): start the query with a new checkpoint"
            )
        snapshot_id = self._snapshot[0]

        return self._call(
            lambda conn: snapshot.table_snapshots(
                conn, self.options.queue, self.tables, tick, snapshot_id
            )
        )

    def release_snapshot(self) -> None:
        """Close the snapshot's transaction: every task has imported it."""
        self._snapshot = None
        self._held.close()

    def commit(self, end: int) -> None:
        """Spark will never ask for ticks before ``end`` again: move the consumer there, so
        the queue may let go of them."""
        opts = self.options
        self._call(ranges.move_consumer, opts.queue, opts.consumer, end)

    def close(self) -> None:
        self.release_snapshot()
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None


def _newest(conn: psycopg.Connection, queue: str) -> int:
    newest = queue_ticks.tick_range(conn, queue)[1]
    if newest is None:
        raise QueueError(f"pgferry change feed: no queue {queue!r}")
    return newest


def _cascade_consumer(conn: psycopg.Connection, queue: str, consumer: str) -> str | None:
    """What else reads the queue under this name, if anything: a node's worker or a copy's
    catch-up (their positions must not move under them), or a reader of batches."""
    if ".copy." in consumer:
        return "the consumer of a table copy's catch-up"
    if model.is_installed(conn) and any(consumer in sub for sub in model.subscribers(conn, queue)):
        return "the consumer of a cascade node"
    info = [r for r in queue_api.consumer_info(conn, queue) if r["consumer_name"] == consumer]
    if info and info[0]["current_batch"] is not None:
        return "reading a batch (a batch consumer's)"
    return None


def _check_tables(
    conn: psycopg.Connection, queue: str, tables: tuple[str, ...], where: str
) -> None:
    """ConfigError naming the first of ``tables`` that the queue does not replicate: a
    misspelt name would otherwise give an empty feed, silently. A provider without
    pgferry's registry (a queue filled by an application) has no list to check against."""
    if not tables or not entries.is_installed(conn):
        return
    known = {e.table_name for e in entries.list_tables(conn, queue, local_only=False)}
    unknown = [t for t in tables if t not in known]
    if unknown:
        raise ConfigError(
            f"pgferry change feed: table {unknown[0]} is not replicated by queue {queue!r}"
            f" on {where} (option tables)"
        )


# --- executors -----------------------------------------------------------------------------
# The key of a row event: its columns in quote_ident form, split where a quoted name may
# itself hold a comma, unquoted, each paired with its value in the row image. As jsonb's
# text: compact ({"id": 42}) and one text per key value, so a sink can group on it.
_KEY_SQL = (
    "case when e.ev_type ~ '^[IUD]:.' then (select jsonb_object_agg(k.n, e.ev_data::jsonb -> k.n)"
    " from (select case when m[1] like '\"%' then replace(substr(m[1], 2, length(m[1]) - 2),"
    " '\"\"', '\"') else m[1] end as n"
    ' from regexp_matches(substr(e.ev_type, 3), \'("(?:[^"]|"")*"|[^,]+)\', \'g\') m) k)::text'
    " end"
)


def row_query(
    span: Span,
    tables: tuple[str, ...],
    ddl: bool = True,
    columns: list[tuple[str, str]] | None = None,
    ordered: bool = True,
) -> sql.Composed:
    """The feed's events of one span in ev_id order: row events and truncates (of
    ``tables`` only, when given) and, with ``ddl``, queued scripts (captured DDL and
    ``execute``), whose tables :func:`script_rows` finds; removal events are the cascade's
    business.  Columns: ev_id, table, op, data, key, ev_time, old_data, and for a script
    its header attributes (in old_data's place) and the queue's tables when it was queued;
    with ``columns`` (typed), then the row's columns and the old row's.  ``ordered=False``
    for a table's snapshot, whose rows all have ev_id 0: no sort of the whole table."""
    only = (
        sql.SQL(" and e.ev_extra1 = any({})").format(sql.Literal(list(tables)))
        if tables
        else sql.SQL("")
    )
    scripts = (
        sql.SQL(" or e.ev_type = {}").format(sql.Literal(EXECUTE_EVENT)) if ddl else sql.SQL("")
    )
    if span.pieces > 1:
        piece = sql.SQL(" and e.ev_id % {} = {}").format(
            sql.Literal(span.pieces), sql.Literal(span.piece)
        )
    else:
        piece = sql.SQL("")
    return sql.SQL(
        "select e.ev_id, e.ev_extra1,"
        " case when e.ev_type = 'R' then 'T' when e.ev_type = {execute} then 'S'"
        " else left(e.ev_type, 1) end,"
        " case when e.ev_type = 'R' then null else e.ev_data end, {key}, e.ev_time,"
        " case when e.ev_type like 'U:%' or e.ev_type = {execute} then e.ev_extra2 end,"
        " case when e.ev_type = {execute} then e.ev_extra4 end{typed}"
        " from ({span}) e{images}"
        " where ((e.ev_type = 'R' or e.ev_type ~ '^[IUD]:'){only}{scripts}){piece}"
        "{order}"
    ).format(
        order=sql.SQL(" order by e.ev_id" if ordered else ""),
        key=sql.SQL(_KEY_SQL),
        span=sql.SQL(span.query),
        only=only,
        scripts=scripts,
        piece=piece,
        execute=sql.Literal(EXECUTE_EVENT),
        typed=sql.SQL(", d.*, o.*") if columns else sql.SQL(""),
        images=typed.images(columns) if columns else sql.SQL(""),
    )


def script_rows(
    script: str, attrs: str | None, queue_tables: str | None, tables: tuple[str, ...]
) -> list[tuple[str, str]]:
    """``(table, statement)`` per replicated table each statement of a queued script
    names (of ``tables`` only, when given), in order.  A script with a ``Local-Table``
    header (a captured ``DROP INDEX`` names only its index) is whole, for those tables."""
    try:
        local = ScriptAttrs.from_text(attrs).values.get("local-table", [])
    except PgferryError:
        local = []
    if local:
        found = [(script, local)]
    else:
        try:
            known = set(json.loads(queue_tables or "[]"))
        except ValueError:
            known = set()
        try:
            found = statements_naming(script, known)
        except ScriptTranslateError:
            # The root parsed it when it was queued; a parser that cannot is not a reason
            # to hide a schema change: the whole script, for every table it may touch.
            found = [(script, sorted(known))]
    return [
        (table, text) for text, named in found for table in named if not tables or table in tables
    ]


def read_chunks(
    provider: str,
    tables: tuple[str, ...],
    spans: tuple[Span, ...],
    ddl: bool = True,
    columns: list[tuple[str, str]] | None = None,
    snapshot_id: str | None = None,
) -> Iterator[list[tuple]]:
    """The rows of a partition (tuples in :data:`COLUMNS` order) in chunks of at most
    :data:`FETCH_ROWS`, read in one read-only transaction.  With ``columns`` (typed),
    ``data`` and ``old_data`` are tuples of the row's values (or None) and a last item
    is an ``S`` row's statement.  With ``snapshot_id``, the read is in that snapshot (the
    spans are then table snapshots)."""
    width = len(columns or ())
    try:
        # Planned on the driver before the task ran: a provider failing over meanwhile is
        # waited for (a task started in that window would otherwise fail the query).
        conn = reconnect(provider, application_name="pgferry-changefeed")
    except DatabaseError as exc:
        raise DatabaseError(f"pgferry change feed: {exc}") from None
    try:
        with conn:
            conn.read_only = True
            if snapshot_id is not None:
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                conn.execute(
                    sql.SQL("set transaction snapshot {}").format(sql.Literal(snapshot_id))
                )
            for span in spans:
                with conn.cursor(name=f"ferry_feed_{span.tick}_{span.piece}") as cur:
                    cur.execute(row_query(span, tables, ddl, columns, snapshot_id is None))
                    while rows := cur.fetchmany(FETCH_ROWS):
                        chunk = []
                        for row in rows:
                            ev_id, table, op, data, key, ev_time, old, queued = row[:8]
                            head = (span.tick, ev_id)
                            if op == "S":
                                for named, text in script_rows(data or "", old, queued, tables):
                                    tail = (None, text) if width else (None,)
                                    chunk.append(
                                        (*head, named, op, None if width else text, None)
                                        + (span.tick_time, ev_time, *tail)
                                    )
                                continue
                            if width:
                                image = row[8 : 8 + width] if data is not None else None
                                before = row[8 + width :] if old and old[:1] == "{" else None
                                data, old = image, before
                            tail = (old, None) if width else (old,)
                            chunk.append(
                                (*head, table, op, data, key, span.tick_time, ev_time, *tail)
                            )
                        yield chunk
    except psycopg.Error as exc:
        where = describe(provider)
        raise DatabaseError(f"pgferry change feed: {where}: {error_text(exc)}") from None
