"""The reads replay makes on the provider, under the stages that ask for them.

* Queries in a read-only transaction of their own, on an idle autocommit connection sent
  as one message (:func:`read_only_results`): a batch's summary (:mod:`.summary`), a
  small batch's arrays (:mod:`.small_batch`), the columns a table's queued rows carry
  (:mod:`.shapes`).
* The rare events read apart, in ev_id order: queued scripts (:class:`ScriptEvent`) and
  removals of tables and sequences (:class:`RemovalEvent`), read by :mod:`.summary`.
* A table part's rows as COPY data (:func:`read_chunks`; :func:`read_part` is the body
  of a Spark task), read inline or ahead of the apply by :mod:`pgferry.apply.replay.part_reads`.

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
from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError, PgferryError
from pgferry.queue.batches import EVENT_RANGE_TYPES, EventRange

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
