"""Every read replay makes on the provider, and what it hands on.

* What a batch segment holds: :func:`summarize` runs its summary query
  (:mod:`pgferry.apply.batch_sql`) and gives :class:`~pgferry.apply.batch_sql.SummaryRow`
  items, which the planner (:mod:`pgferry.apply.plan`, no I/O of its own) turns into work.
* The rare events read apart, in ev_id order: queued scripts (:class:`ScriptEvent`) and
  removals of tables and sequences (:class:`RemovalEvent`).
* What the provider has of the replayed tables and of the subscriber's own column types
  (:class:`TableShapes`, read once and kept between batches).
* A table part's rows as COPY data (:func:`read_chunks`; :func:`read_part` is the body
  of a Spark task), read inline or ahead of the apply by :mod:`pgferry.apply.readers`.

Every provider read runs in a read-only transaction: an operator's copy condition runs
there.  So flow is one way: read, plan, then read the parts while applying them.

A batch read inline (at most ``replay_read_ahead_events``: the latency path) is read with
its tick range as parameters (:class:`PreparedBatch`): its summary and its tables' reads
are then the same texts from batch to batch, each prepared once per provider session and
run with a generic plan (the event lookups are index probes on ``ev_txid``, whatever the
range).  Planned anew, as the texts with the range inlined are, their planning was two
thirds of the provider's time on the reads (BENCHMARKS.md).  A larger batch keeps the
inlined text: COPY, which its tables are read with, takes no parameters, and its plan
depends on the range's size.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import weakref
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import ExecStatus, TransactionStatus

from pgferry import copyio
from pgferry.apply.batch_sql import (
    Segment,
    SummaryRow,
    fold_summary,
    grouped_summary_query,
    summary_query,
    summary_rows,
)
from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError, PgferryError
from pgferry.events import REMOVAL_EVENTS
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import EVENT_RANGE_TYPES, EventRange
from pgferry.registry.routes import Route

# Both ends of a typed COPY must agree on the text forms of dates, intervals and floats.
TEXT_FORMAT = (
    "set datestyle = 'ISO, YMD'",
    "set intervalstyle = 'postgres'",
    "set extra_float_digits = 3",
    "set bytea_output = 'hex'",
)

APPLICATION_NAME = "pgferry-replay"  # how reader connections show in pg_stat_activity


class ReplayError(PgferryError):
    """A batch could not be applied (the message names the table where it is known)."""


def set_text_format(conn: psycopg.Connection) -> None:
    for stmt in TEXT_FORMAT:
        conn.execute(stmt)


def copy_options(binary: bool) -> str:
    return " (format binary)" if binary else ""


@contextmanager
def read_only(conn: psycopg.Connection) -> Iterator[None]:
    """A read-only transaction on ``conn`` (an operator's copy condition runs there).

    On an idle connection it opens with ``BEGIN READ ONLY``: one round trip, where BEGIN
    and SET TRANSACTION are two (a small batch makes one such read per table).  Inside a
    transaction: a savepoint made read-only, as before.
    """
    if conn.info.transaction_status != TransactionStatus.IDLE or conn.read_only is not None:
        with conn.transaction():
            conn.execute("set transaction read only")
            yield
        return
    conn.read_only = True
    try:
        with conn.transaction():
            yield
    finally:
        if conn.info.transaction_status == TransactionStatus.IDLE:
            conn.read_only = None  # for that BEGIN only: the connection is as it was


def _idle_autocommit(conn: psycopg.Connection) -> bool:
    """Whether a read can open and commit its own transaction in the statement's message."""
    return conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE


# A summary's estimate can pass jit_above_cost while the batch holds a few events: JIT's
# compilation (tens of milliseconds) would cost more than the query.
NO_JIT = "set local jit = off"

# A backlog's first summary runs while nothing else does (the batch's reads wait for it):
# parallel workers may take its scan and grouping when the batch holds at least this many
# events.  The planner cannot see that on its own: the event tables have no statistics, so
# it takes a batch for a handful of rows.  Later summaries are not parallel: they run while
# a batch is applied, beside it on the same cores.
PARALLEL_SUMMARY_EVENTS = 50000
PARALLEL_SUMMARY = (
    "set local parallel_setup_cost = 0",
    "set local parallel_tuple_cost = 0",
    "set local min_parallel_table_scan_size = 0",
)


def summary_settings(alone_events: int | None = None) -> tuple[str, ...]:
    """The SET LOCAL statements a summary runs after (see :func:`summarize`)."""
    settings: tuple[str, ...] = ("set local enable_sort = off", NO_JIT)
    if alone_events is not None and alone_events >= PARALLEL_SUMMARY_EVENTS:
        settings += PARALLEL_SUMMARY
    return settings


@dataclass(frozen=True)
class PreparedBatch:
    """A batch's event query with its tick range as parameters
    (:func:`pgferry.queue.batches.generic_event_sql`) and the range's values: the reads
    composed on ``sql`` are the same text for every batch, prepared once per session."""

    sql: str
    events: EventRange


# Generic plans: a custom plan would be planned at every batch, which is what preparing
# saves.  The lookups are index probes on ev_txid whatever the range, and must stay so: a
# generic plan is kept while the event partition grows (the event tables have no
# statistics), and one that scanned it whole because it was small when planned would
# read every event of the partition at every batch.
GENERIC_PLAN = (
    "set local plan_cache_mode = force_generic_plan",
    "set local enable_seqscan = off",
)
# Statements prepared per session at most (a summary, a read per table shape): the least
# recently run goes first.
PREPARED_MAX = 256
# Per connection, the statements prepared on its session, least recently run first.
_PREPARED: weakref.WeakKeyDictionary[psycopg.Connection, collections.OrderedDict[str, None]] = (
    weakref.WeakKeyDictionary()
)
_NAME_PREFIX = "pgferry_read_"  # the batch's description is pgferry_batch_ (queue)


@functools.lru_cache(maxsize=1024)
def _statement_name(query: str) -> str:
    return _NAME_PREFIX + hashlib.sha1(query.encode()).hexdigest()[:32]


def _prepared_message(
    conn: psycopg.Connection, queries: list[str], events: EventRange
) -> tuple[list[str], list[str], list[str]]:
    """(statements to send before, EXECUTEs of ``queries`` with ``events``' values, names
    prepared by them): a query not prepared on this session yet is PREPAREd in the same
    message, the least recently run ones past :data:`PREPARED_MAX` deallocated."""
    known = _PREPARED.setdefault(conn, collections.OrderedDict())
    values = ", ".join(sql.Literal(v).as_string(conn) for v in events.args())
    types = ", ".join(EVENT_RANGE_TYPES)
    before: list[str] = []
    executes: list[str] = []
    new: list[str] = []
    for query in queries:
        name = _statement_name(query)
        if name in known:
            known.move_to_end(name)
        elif name not in new:
            before.append(f"prepare {name} ({types}) as {query}")
            new.append(name)
        executes.append(f"execute {name} ({values})")
    while len(known) + len(new) > PREPARED_MAX and known:
        before.insert(0, f"deallocate {known.popitem(last=False)[0]}")
    return before, executes, new


def _forget_prepared(conn: psycopg.Connection) -> None:
    """After a failed message: what the session holds is read again."""
    known = _PREPARED.setdefault(conn, collections.OrderedDict())
    known.clear()
    if conn.broken or conn.info.transaction_status != TransactionStatus.IDLE:
        _PREPARED.pop(conn, None)
        return
    rows = conn.execute(
        "select name from pg_prepared_statements where starts_with(name, %s)", (_NAME_PREFIX,)
    ).fetchall()
    known.update((name, None) for (name,) in rows)


def read_only_rows(
    conn: psycopg.Connection,
    query: str,
    *,
    settings: tuple[str, ...] = (),
    events: EventRange | None = None,
) -> list[tuple[Any, ...]]:
    """The rows of ``query`` (after ``settings``, SET LOCAL statements) in a read-only
    transaction of their own (:func:`read_only_results`)."""
    return read_only_results(conn, [query], settings=settings, events=events)[0]


def read_only_results(
    conn: psycopg.Connection,
    queries: list[str],
    *,
    settings: tuple[str, ...] = (),
    events: EventRange | None = None,
) -> list[list[tuple[Any, ...]]]:
    """The rows of each of ``queries`` (after ``settings``, SET LOCAL statements) in one
    read-only transaction of their own.

    On an idle autocommit connection BEGIN, the settings, the queries and COMMIT go as one
    message (the simple query protocol takes several statements): one round trip where
    they were one each.  Otherwise as :func:`read_only` runs them.

    ``events``: the queries are composed on the generic event query, whose parameters
    these are (:class:`PreparedBatch`); each is prepared on the session once, in the
    message that first runs it, and run with EXECUTE and a generic plan.
    """
    if events is not None:
        settings = (*settings, *GENERIC_PLAN)
    if not _idle_autocommit(conn):
        with read_only(conn):
            for setting in settings:
                conn.execute(setting)
            if events is not None:  # $1 .. $6: psycopg prepares what it runs a few times
                with psycopg.RawCursor(conn) as raw:
                    return [raw.execute(q.encode(), events.args()).fetchall() for q in queries]
            return [conn.execute(query.encode()).fetchall() for query in queries]
    before: list[str] = []
    new: list[str] = []
    if events is not None:
        before, queries, new = _prepared_message(conn, queries, events)
    text = "; ".join(["begin transaction read only", *settings, *before, *queries, "commit"])
    results: list[list[tuple[Any, ...]]] = []
    try:
        with conn.cursor() as cur:
            cur.execute(text.encode(), prepare=False)
            while True:  # one result per statement: the queries' are those with rows
                if cur.pgresult is not None and cur.pgresult.status == ExecStatus.TUPLES_OK:
                    results.append(cur.fetchall())
                if not cur.nextset():
                    break
    except BaseException:
        # A failed statement skips the COMMIT: the transaction is left open and aborted.
        if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
            conn.execute("rollback")
        if events is not None:
            _forget_prepared(conn)
        raise
    if new:
        _PREPARED[conn].update((name, None) for name in new)
    return results


def read_chunks(conn: psycopg.Connection, query: str, binary: bool = False) -> Iterator[bytes]:
    """The COPY data of ``query``, in chunks of about ``copyio.CHUNK_BYTES``."""
    stmt = sql.SQL("copy (" + query + ") to stdout" + copy_options(binary))
    with provider_named(conn):
        if _idle_autocommit(conn):
            # BEGIN READ ONLY, the COPY and COMMIT in one message (one round trip).
            yield from copyio.copy_out(conn, stmt, read_only=True)
        else:
            with read_only(conn):
                yield from copyio.copy_out(conn, stmt)


def read_many(
    conn: psycopg.Connection, queries: list[tuple[str, bool]]
) -> Generator[Iterable[bytes], None, None]:
    """The COPY data of each of ``queries`` (query, binary), in order: on an idle
    autocommit connection all sent in one message, one round trip for them all
    (:func:`pgferry.copyio.copy_out_many`); else one read after the other.  Each one's data
    is read before the next is taken."""
    if not _idle_autocommit(conn):
        for query, binary in queries:
            yield read_chunks(conn, query, binary)
        return
    stmts: list[sql.Composable] = [
        sql.SQL("copy (" + query + ") to stdout" + copy_options(binary))
        for query, binary in queries
    ]
    streams = copyio.copy_out_many(conn, stmts, read_only=True)
    try:
        with provider_named(conn):
            for chunks in streams:
                yield _provider_named_chunks(conn, chunks)
    finally:
        streams.close()


@contextmanager
def provider_named(conn: psycopg.Connection) -> Iterator[None]:
    try:
        yield
    except psycopg.OperationalError as exc:
        if not conn.broken:
            raise
        # The provider went away mid-read (a stalled network: db.NETWORK_DEFAULTS): say
        # which one, the applying side only knows its own table.
        raise DatabaseError(f"provider {describe(conn.info.dsn)}: {error_text(exc)}") from None


def _provider_named_chunks(conn: psycopg.Connection, chunks: Iterator[bytes]) -> Iterator[bytes]:
    with provider_named(conn):
        yield from chunks


def read_part(provider_dsn: str, query: str, binary: bool = False) -> list[bytes]:
    """Spark task body, run on an executor: one table part's COPY data (the driver loads
    it).  A module-level function, so that Spark pickles it by reference."""
    try:
        with connect(provider_dsn, autocommit=True, application_name=APPLICATION_NAME) as prov:
            set_text_format(prov)
            return list(read_chunks(prov, query, binary))
    except psycopg.Error as exc:
        raise DatabaseError(error_text(exc)) from None


# --- what a segment holds ------------------------------------------------------------------


def summarize(
    provider: psycopg.Connection,
    batch_sql: str,
    routes: dict[str, Route],
    sequences: Iterable[str],
    segment: Segment,
    *,
    scripts: bool = False,
    removals: bool = False,
    alone_events: int | None = None,
    prepared: PreparedBatch | None = None,
) -> list[SummaryRow]:
    """The summary rows of the segment (see :func:`pgferry.apply.batch_sql.summary_query`);
    ``scripts`` and ``removals`` add the row that counts them.  ``alone_events``: the
    segment's events, estimated, when nothing else of the worker runs beside the summary
    (it may then be read in parallel, :data:`PARALLEL_SUMMARY_EVENTS`).  ``prepared``:
    the batch's event query with its range as parameters, read instead of ``batch_sql``."""
    active = [r for r in routes.values() if r.applies]
    seqs = list(sequences)
    if not active and not seqs and not scripts and not removals:
        return []
    # Grouped on the provider's plain columns and folded here, unless a copy hand-over
    # filters some table's events by transaction (only the per-table query can).
    grouped = not any(r.copy_snapshot for r in active)
    events = None
    if prepared is not None:
        batch_sql, events = prepared.sql, prepared.events
    if grouped:
        query = grouped_summary_query(batch_sql, seqs, segment)
    else:
        query = summary_query(batch_sql, active, seqs, segment, scripts=scripts, removals=removals)
    try:
        # Read-only: copy conditions run here.  Few groups, many rows: hashing beats the
        # sort that the planner's row estimate for a batch (a handful) would choose, and
        # spills to disk.
        rows = read_only_rows(
            provider, query, settings=summary_settings(alone_events), events=events
        )
    except psycopg.Error as exc:
        raise ReplayError(f"reading the batch: {error_text(exc)}") from None
    if grouped:
        return fold_summary(rows, active, seqs, scripts=scripts, removals=removals)
    return summary_rows(rows)


@dataclass(frozen=True)
class ScriptEvent:
    """A queued script (an EXECUTE event): replayed at its place between the rows."""

    ev_id: int
    sql: str
    file_name: str
    attrs_text: str | None  # its header attributes, as the root queued them
    tables_json: str | None  # the queue's tables the script names, as JSON


@dataclass(frozen=True)
class RemovalEvent:
    """A root's or branch's removal of a table or sequence (one of ``REMOVAL_EVENTS``)."""

    ev_id: int
    ev_type: str
    name: str | None  # the table or sequence
    origin: str | None  # the node that removed it


def read_scripts(provider: psycopg.Connection, batch_sql: str) -> list[ScriptEvent]:
    """The batch's queued scripts in ev_id order."""
    return [ScriptEvent(*row) for row in queue_batches.scripts(provider, batch_sql)]


def read_removals(provider: psycopg.Connection, batch_sql: str) -> list[RemovalEvent]:
    """The batch's removals of tables and sequences in ev_id order."""
    rows = queue_batches.events_of_types(provider, batch_sql, REMOVAL_EVENTS)
    return [RemovalEvent(*row) for row in rows]


# --- what the provider has of the tables ---------------------------------------------------


class TableShapes:
    """What the provider has of the replayed tables (their columns) and of the subscriber's
    own column types, read once and kept until :meth:`forget` (the provider or a table's
    shape may have changed).

    The provider's catalog shows its tables as they are now, which is not always the shape
    of the rows still queued: a leaf behind may apply rows written before a RENAME COLUMN
    or DROP COLUMN whose script is in a later batch (a queued script after the rows of
    the same batch is :mod:`.script_shapes`' part).  Where a table's columns on the
    subscriber are not all on the provider, the columns its queued rows carry are read
    from one of them (:meth:`carried`) and replace the catalog's: every row queued
    between two scripts carries the same columns, and replay forgets them after each
    script."""

    def __init__(self) -> None:
        self._src_cols: dict[str, frozenset[str] | None] = {}
        self._prov_types: dict[str, bool] = {}  # the provider has this local type
        self._carried: dict[str, frozenset[str]] = {}  # registry name -> its rows' keys

    def forget(self) -> None:
        self._src_cols, self._prov_types, self._carried = {}, {}, {}

    def carried(
        self, provider: psycopg.Connection, batch_sql: str, rows: dict[str, int]
    ) -> dict[str, frozenset[str]]:
        """Per table of ``rows`` (registry name -> the ev_id of one of its row events in
        ``batch_sql``), the columns its queued rows carry, read once until :meth:`forget`."""
        wanted = {ev_id: t for t, ev_id in rows.items() if t not in self._carried}
        if wanted:
            self._carried.update(_row_keys(provider, batch_sql, wanted))
        return {t: self._carried[t] for t in rows if t in self._carried}

    def source_columns(
        self, provider: psycopg.Connection, active: list[Route]
    ) -> dict[str, frozenset[str] | None]:
        """Per source table, its columns on the provider (None: the provider has no such
        table)."""
        for route in active:
            name = route.source_type or route.table_name
            if name not in self._src_cols:
                self._src_cols[name] = _source_columns(provider, name)
        renamed = {r.table_name: self._src_cols[r.source_type] for r in active if r.source_type}
        if not renamed and not self._carried:
            return self._src_cols
        return {**self._src_cols, **renamed, **self._carried}

    def provider_types(self, provider: psycopg.Connection, active: list[Route]) -> dict[str, bool]:
        """Whether the provider has each of the subscriber's own column types."""
        wanted = {t for r in active if not r.builtin_types for t in r.types}
        missing = sorted(wanted - self._prov_types.keys())
        if missing:
            self._prov_types.update(_types_present(provider, missing))
        return self._prov_types


def _source_columns(conn: psycopg.Connection, table_name: str) -> frozenset[str] | None:
    row = conn.execute(
        """
        select array_agg(attname) from pg_attribute
         where attrelid = to_regclass(%s) and attnum > 0 and not attisdropped
        """,
        (table_name,),
    ).fetchone()
    return frozenset(row[0]) if row and row[0] else None


def _row_keys(
    conn: psycopg.Connection, batch_sql: str, wanted: dict[int, str]
) -> dict[str, frozenset[str]]:
    """The keys of the row events of ``batch_sql`` with the ev_ids of ``wanted`` (ev_id ->
    the table's registry name): the columns they carry."""
    ids = ",".join(str(int(ev_id)) for ev_id in sorted(wanted))
    # batch_sql is the queue's own text (with braces: no sql.SQL.format).  The limit ends
    # the scan of a large batch once each row is found (each is a table's first).
    query = (
        "select e.ev_id, array(select json_object_keys(e.ev_data::json))"
        f" from ({batch_sql}) e where e.ev_id = any(array[{ids}]::bigint[])"
        f" limit {len(wanted)}"
    )
    try:
        rows = read_only_rows(conn, query)
    except psycopg.Error as exc:
        raise ReplayError(f"reading the batch's columns: {error_text(exc)}") from None
    return {wanted[ev_id]: frozenset(keys) for ev_id, keys in rows if ev_id in wanted}


def _types_present(conn: psycopg.Connection, type_names: list[str]) -> dict[str, bool]:
    """Which of ``type_names`` (SQL text, as in ``Route.types``) exist on ``conn``."""
    rows = conn.execute(
        "select t, to_regtype(t) is not null from unnest(%s::text[]) as t", (type_names,)
    ).fetchall()
    return {name: bool(present) for name, present in rows}
