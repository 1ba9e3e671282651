"""Replay of one batch: read on the provider, collapse per key, stage typed, apply set-based.

Data path (design-notes §3, §7):

1. One summary query on the provider (:func:`pgferry.apply.batch_sql.summary_query`)
   says which tables the batch touches, whether a table saw only inserts, its last
   TRUNCATE and the sequences' values.
2. Per table one query on the provider decodes the row images with the subscriber's types
   and collapses them to the last event per key
   (:func:`pgferry.apply.batch_sql.table_query`); its ``COPY`` output is loaded
   unchanged into a temporary stage table on the subscriber.  The reads run ahead of the
   apply: while the subscriber applies one table, the next tables are being read (driver
   threads, or the tasks of one Spark job that read the table parts in parallel).
3. The apply runs in ONE subscriber transaction (the caller adds the tick record to it):
   TRUNCATE barriers, then per table one DELETE ... USING and one INSERT (ON CONFLICT DO
   UPDATE, or a plain INSERT when the table saw only inserts), then sequences.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import psycopg
from psycopg import sql

from pgferry import copyio
from pgferry.apply.batch_sql import Segment, summary_query, table_query
from pgferry.apply.routes import Route
from pgferry.db import connect, error_text
from pgferry.errors import DatabaseError, PgferryError

log = logging.getLogger(__name__)

# Both ends of a typed COPY must agree on the text forms of dates, intervals and floats.
TEXT_FORMAT = (
    "set datestyle = 'ISO, YMD'",
    "set intervalstyle = 'postgres'",
    "set extra_float_digits = 3",
    "set bytea_output = 'hex'",
)

# Chunks a reader may hold before it waits for the apply (bounds memory per table).
QUEUED_CHUNKS = 64


class ReplayError(PgferryError):
    """A batch could not be applied (the message names the table where it is known)."""


@dataclass
class ApplyStats:
    upserts: int = 0
    deletes: int = 0
    truncates: int = 0
    sequences: int = 0
    tables: set[str] = field(default_factory=set)
    spark: bool = False
    summary_seconds: float = 0.0  # the provider's summary of the batch
    apply_seconds: float = 0.0  # reading and applying, in the open transaction
    commit_seconds: float = 0.0

    def add(self, other: ApplyStats) -> None:
        self.upserts += other.upserts
        self.deletes += other.deletes
        self.truncates += other.truncates
        self.sequences += other.sequences
        self.tables |= other.tables


def set_text_format(conn: psycopg.Connection) -> None:
    for stmt in TEXT_FORMAT:
        conn.execute(stmt)  # type: ignore[arg-type]


# --- what the batch holds -----------------------------------------------------------------


@dataclass(frozen=True)
class TableWork:
    route: Route
    columns: tuple[str, ...]
    rows: int  # row events before the collapse
    inserts_only: bool
    barrier: int | None
    span: Segment | None = None  # an ev_id range of the segment, when the table is split
    order: int = 0  # ranges of one table apply in this order
    binary: bool = False  # COPY in binary format (same built-in types on both sides)
    decode: tuple[str, ...] = ()  # the columns' types as the provider decodes them

    def query(self, batch_sql: str, segment: Segment) -> str:
        return table_query(
            batch_sql,
            self.route,
            self.columns,
            self.decode,
            self.span or segment,
            barrier=self.barrier,
        )


@dataclass
class SegmentPlan:
    tables: list[TableWork]
    truncate: list[Route]  # tables whose TRUNCATE replays (skip_truncate ones excluded)
    sequences: dict[str, int]


def apply_columns(route: Route, src: frozenset[str] | None) -> tuple[str, ...]:
    """Local columns that the source also has (a column only on one side keeps its own)."""
    if src is None:
        return route.columns
    return tuple(c for c in route.columns if c in src or c in route.pk)


def summarize(
    provider: psycopg.Connection,
    batch_sql: str,
    routes: dict[str, Route],
    sequences: Iterable[str],
    segment: Segment,
    *,
    scripts: bool = False,
) -> list[tuple]:
    """The summary rows of the segment (see :func:`summary_query`)."""
    active = [r for r in routes.values() if r.applies]
    seqs = list(sequences)
    if not active and not seqs and not scripts:
        return []
    query = summary_query(batch_sql, active, seqs, segment, scripts=scripts)
    try:
        with provider.transaction():
            provider.execute("set transaction read only")  # copy conditions run here
            # Few groups, many rows: hashing beats the sort that the planner's row
            # estimate for a batch (a handful) would choose, and spills to disk.
            provider.execute("set local enable_sort = off")
            return provider.execute(query.encode()).fetchall()
    except psycopg.Error as exc:
        raise ReplayError(f"reading the batch: {error_text(exc)}") from None


def count_scripts(summary: list[tuple]) -> int:
    return sum(row[7] for row in summary)


def plan_segment(
    summary: list[tuple],
    routes: dict[str, Route],
    sequences: Iterable[str],
    source_columns: dict[str, frozenset[str] | None],
    *,
    range_events: int | None = None,
    binary: bool = False,
    provider_types: Mapping[str, bool] | None = None,
) -> SegmentPlan:
    """What the segment holds, per table; with ``range_events`` a table with more row
    events is split into ev_id ranges of about that many, read in parallel and applied in
    ev_id order (each range collapses on its own; a later range overrides an earlier one).
    ``binary``: both servers are of one major version, so tables whose columns all have
    built-in types move in COPY's binary format (no text output and parsing).
    ``provider_types`` says which of the subscriber's own (not built-in) types the provider
    has too; a column of a type it lacks is decoded as text there and parsed by the type's
    input function on the subscriber, as the initial copy does."""
    seqs = set(sequences)
    plan = SegmentPlan([], [], {})
    for name, count, inserts_only, barrier, seq_value, first, last, _scripts in summary:
        if name is None:
            continue  # the scripts' row
        if seq_value is not None and name in seqs:
            plan.sequences[name] = seq_value
            continue
        route = routes.get(name)
        if route is None or not route.applies:
            continue
        if barrier is not None and not route.skip_truncate:
            plan.truncate.append(route)
        if count:
            cols = apply_columns(route, source_columns.get(name))
            work = TableWork(
                route, cols, count, bool(inserts_only), barrier,
                binary=binary and route.builtin_types,
                decode=_decode_types(route, cols, provider_types or {}),
            )  # fmt: skip
            plan.tables.extend(_split(work, first, last, range_events))
    # First ranges first, larger tables before smaller ones: what is read first is applied
    # first, while the rest is read.
    plan.tables.sort(key=lambda w: (w.order, -w.rows, w.route.table_name))
    plan.truncate.sort(key=lambda r: r.table_name)
    return plan


def _decode_types(
    route: Route, cols: tuple[str, ...], provider_types: Mapping[str, bool]
) -> tuple[str, ...]:
    """The destination's types of ``cols``; text for those the provider does not have."""
    by_name = dict(zip(route.columns, route.types, strict=True))
    return tuple(by_name[c] if provider_types.get(by_name[c], True) else "text" for c in cols)


def _split(work: TableWork, first: int, last: int, range_events: int | None) -> list[TableWork]:
    if not range_events or work.rows <= range_events or last <= first:
        return [work]
    n = min(-(-work.rows // range_events), last - first + 1)
    bounds = [first - 1 + (last - first + 1) * i // n for i in range(n + 1)]
    return [
        replace(work, rows=work.rows // n, span=Segment(lo, hi), order=i)
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]


# --- reading on the provider ----------------------------------------------------------------


def _copy_options(binary: bool) -> str:
    return " (format binary)" if binary else ""


def read_chunks(conn: psycopg.Connection, query: str, binary: bool = False) -> Iterator[bytes]:
    """The COPY data of ``query``, in chunks of about ``copyio.CHUNK_BYTES``."""
    stmt = "copy (" + query + ") to stdout" + _copy_options(binary)
    with conn.transaction():
        conn.execute("set transaction read only")  # an operator's copy condition runs here
        with conn.cursor() as cur, cur.copy(stmt) as src:  # type: ignore[arg-type]
            yield from copyio.gather(src)


def read_part(provider_dsn: str, query: str, binary: bool = False) -> list[bytes]:
    """Spark task body: one table part's COPY data (the driver loads it)."""
    try:
        with connect(provider_dsn, autocommit=True, application_name="pgferry-replay") as prov:
            set_text_format(prov)
            return list(read_chunks(prov, query, binary))
    except psycopg.Error as exc:
        raise DatabaseError(error_text(exc)) from None


class _Stream:
    """Chunks of one table handed from a reader thread to the applying thread.

    ``ready`` tells the applier the stream can be consumed without waiting for its
    reader: it is complete (or failed), or its queue is full.
    """

    _END = object()

    def __init__(self, wakeup: threading.Condition) -> None:
        self.q: queue.Queue = queue.Queue(maxsize=QUEUED_CHUNKS)
        self.cancelled = threading.Event()
        self.ready = False
        self._wakeup = wakeup

    def _mark_ready(self) -> None:
        with self._wakeup:
            self.ready = True
            self._wakeup.notify_all()

    def put(self, item) -> bool:
        final = item is self._END or isinstance(item, BaseException)
        while not self.cancelled.is_set():
            try:
                self.q.put(item, timeout=0.2)
                if final:
                    self._mark_ready()
                return True
            except queue.Full:
                self._mark_ready()
        return False

    def __iter__(self) -> Iterator[bytes]:
        while True:
            item = self.q.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


def next_ready(streams: list[_Stream], wakeup: threading.Condition) -> int:
    """Index of the first stream that is ready, waiting for one if none is yet."""
    with wakeup:
        while True:
            for i, stream in enumerate(streams):
                if stream.ready:
                    return i
            wakeup.wait(timeout=1.0)


# Reads one query's COPY data somewhere else than on a pool connection (a Spark task).
RemoteRead = Callable[[str, bool], Iterable[bytes]]


class ReaderPool:
    """Threads that read table queries ahead of the apply.

    Each thread reads on a provider connection of its own, kept between batches (a
    connection per batch would cost more than a small batch does), or, with ``remote``,
    has each query read by one Spark task; :meth:`close` when the worker disconnects.
    """

    def __init__(self, dsn: str, size: int, remote: RemoteRead | None = None) -> None:
        self.dsn = dsn
        self.size = max(1, size)
        self.remote = remote
        self._idle: queue.Queue[psycopg.Connection] = queue.Queue()
        self._all: list[psycopg.Connection] = []
        self._lock = threading.Lock()

    def _take(self) -> psycopg.Connection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            conn = connect(self.dsn, autocommit=True, application_name="pgferry-replay")
            set_text_format(conn)
            with self._lock:
                self._all.append(conn)
            return conn

    def _give(self, conn: psycopg.Connection, broken: bool = False) -> None:
        status = conn.info.transaction_status
        if broken or conn.closed or status != psycopg.pq.TransactionStatus.IDLE:
            with self._lock:
                if conn in self._all:
                    self._all.remove(conn)
            conn.close()
        else:
            self._idle.put(conn)

    def stream(
        self, queries: Sequence[tuple[str, str, bool]]
    ) -> tuple[list[_Stream], threading.Condition, Callable]:
        """Start reading ``(label, query, binary)`` in order; returns their streams, the
        condition that signals a ready stream, and a function that stops what still runs."""
        wakeup = threading.Condition()
        streams = [_Stream(wakeup) for _ in queries]
        order: queue.Queue[int] = queue.Queue()
        for i in range(len(queries)):
            order.put(i)

        running: dict[int, psycopg.Connection] = {}

        def run() -> None:
            while True:
                try:
                    i = order.get_nowait()
                except queue.Empty:
                    return
                stream = streams[i]
                if stream.cancelled.is_set():
                    continue
                label, query, binary = queries[i]
                conn = None
                try:
                    if self.remote is not None:
                        chunks = self.remote(query, binary)
                    else:
                        conn = self._take()
                        running[i] = conn
                        chunks = read_chunks(conn, query, binary)
                    for chunk in chunks:
                        if not stream.put(chunk):
                            break
                    else:
                        stream.put(_Stream._END)
                except Exception as exc:  # noqa: BLE001 - handed to the applying thread
                    msg = error_text(exc) if isinstance(exc, psycopg.Error) else str(exc)
                    stream.put(ReplayError(f"reading {label}: {msg}"))
                finally:
                    running.pop(i, None)
                    if conn is not None:
                        self._give(conn, broken=stream.cancelled.is_set())

        threads = [
            threading.Thread(target=run, name="pgferry-read", daemon=True)
            for _ in range(min(self.size, len(queries)))
        ]
        for t in threads:
            t.start()

        def stop() -> None:
            for s in streams:
                s.cancelled.set()
            for conn in list(running.values()):
                with contextlib.suppress(psycopg.Error):
                    conn.cancel_safe(timeout=5)
            for t in threads:
                t.join()

        return streams, wakeup, stop

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self._idle = queue.Queue()


# --- applying on the subscriber ---------------------------------------------------------------


class StageTables:
    """Temporary stage tables of the applying connection, one per (table, columns).

    A stage has the destination's column types (created from it), so COPY parses each
    value once.  The cache belongs to one connection: :meth:`reset` when it changes or when
    a destination's shape may have changed (a replayed script).
    """

    def __init__(self) -> None:
        self._conn_id: int | None = None
        self._names: dict[tuple[str, tuple[str, ...], tuple[str, ...]], sql.Identifier] = {}

    def reset(self) -> None:
        self._names.clear()

    def get(self, conn: psycopg.Connection, route: Route, columns: tuple[str, ...]):
        if self._conn_id != id(conn):
            self._conn_id, self._names = id(conn), {}
        key = (route.dest_fq, columns, route.types)
        name = self._names.get(key)
        if name is None:
            name = sql.Identifier(f"ferry_stage_{len(self._names) + 1}")
            conn.execute(sql.SQL("drop table if exists pg_temp.{}").format(name))
            conn.execute(
                sql.SQL(
                    "create temp table {name} as select ''::\"char\" as op, {cols}"
                    " from {dest} with no data"
                ).format(
                    name=name,
                    cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
                    dest=route.dest,
                )
            )
            self._names[key] = name
        return sql.SQL("pg_temp.{}").format(name)


def load_stage(
    conn: psycopg.Connection, stage: sql.Composable, chunks: Iterable[bytes], binary: bool
) -> int:
    stmt = sql.SQL("copy {} from stdin" + _copy_options(binary)).format(stage)
    with conn.cursor() as cur:
        with cur.copy(stmt) as dst:
            for chunk in chunks:
                dst.write(chunk)
        return max(cur.rowcount, 0)


def apply_table(
    conn: psycopg.Connection,
    stages: StageTables,
    work: TableWork,
    parts: Iterable[Iterable[bytes]],
) -> ApplyStats:
    """Load one table's rows (COPY data of one or more parts) into its stage and apply
    them (caller's transaction)."""
    route = work.route
    stats = ApplyStats()
    try:
        stats.deletes, stats.upserts = _apply_rows(conn, stages, work, parts)
    except psycopg.Error as exc:
        raise ReplayError(f"applying to {route.dest_text}: {error_text(exc)}") from None
    stats.tables.add(route.table_name)
    return stats


def _apply_rows(
    conn: psycopg.Connection,
    stages: StageTables,
    work: TableWork,
    parts: Iterable[Iterable[bytes]],
) -> tuple[int, int]:
    route, cols = work.route, work.columns
    deletes = upserts = 0
    stage = stages.get(conn, route, cols)
    # One COPY per part: a binary COPY stream has a header and an end marker of its own.
    staged = sum(load_stage(conn, stage, part, work.binary) for part in parts)
    if staged:
        pk = [sql.Identifier(c) for c in route.pk]
        deletes = conn.execute(
            sql.SQL(
                "delete from {dest} as t using {stage} as s where s.op = 'D' and ({tpk}) = ({spk})"
            ).format(
                dest=route.dest,
                stage=stage,
                tpk=sql.SQL(", ").join(sql.SQL("t.{}").format(c) for c in pk),
                spk=sql.SQL(", ").join(sql.SQL("s.{}").format(c) for c in pk),
            )
        ).rowcount
        if deletes < staged:
            upserts = _insert(conn, route, cols, stage, work.inserts_only)
    conn.execute(sql.SQL("truncate {}").format(stage))
    return deletes, upserts


def _insert(
    conn: psycopg.Connection,
    route: Route,
    cols: tuple[str, ...],
    stage: sql.Composable,
    inserts_only: bool,
) -> int:
    idents = [sql.Identifier(c) for c in cols]
    base = sql.SQL(
        "insert into {dest} as t ({cols}) overriding system value"
        " select {cols} from {stage} where op <> 'D'"
    ).format(dest=route.dest, cols=sql.SQL(", ").join(idents), stage=stage)
    if inserts_only:
        # Only inserts of this table in the batch: no key can exist here yet, unless the
        # table drifted; then the savepoint turns it back into the upsert.
        try:
            with conn.transaction():
                return conn.execute(base).rowcount
        except psycopg.errors.UniqueViolation:
            log.debug("%s: plain insert met existing keys, upserting", route.dest_text)
    rest = [sql.Identifier(c) for c in cols if c not in route.pk]
    if rest:
        action = sql.SQL("do update set {}").format(
            sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(c) for c in rest)
        )
    else:
        action = sql.SQL("do nothing")
    stmt = sql.SQL("{base} on conflict ({pk}) {action}").format(
        base=base,
        pk=sql.SQL(", ").join(sql.Identifier(c) for c in route.pk),
        action=action,
    )
    return conn.execute(stmt).rowcount


def apply_truncates(conn: psycopg.Connection, routes: Sequence[Route]) -> int:
    if routes:
        conn.execute(sql.SQL("truncate only {}").format(sql.SQL(", ").join(r.dest for r in routes)))
    return len(routes)


def apply_sequences(conn: psycopg.Connection, values: dict[str, int]) -> int:
    """Sequences never move backwards on a subscriber."""
    for seq_name, value in sorted(values.items()):
        conn.execute("select ferry.seq_advance(%s::regclass, %s)", (seq_name, value))
        conn.execute(
            """
            update ferry.seq_info set last_value = greatest(coalesce(last_value, %s), %s)
             where seq_name = %s and local
            """,
            (value, value, seq_name),
        )
    return len(values)


# --- one segment, start to end -------------------------------------------------------------


def apply_segment(
    conn: psycopg.Connection,
    stages: StageTables,
    plan: SegmentPlan,
    batch_sql: str,
    segment: Segment,
    *,
    provider: psycopg.Connection,
    readers: ReaderPool | None = None,
) -> ApplyStats:
    """Apply ``plan`` inside the caller's transaction on ``conn``.

    Rows are read by ``readers`` (threads, or Spark tasks, reading ahead of the apply) or,
    for small segments, inline on the worker's own ``provider`` connection.
    """
    stats = ApplyStats(truncates=apply_truncates(conn, plan.truncate))
    works = plan.tables
    try:
        if readers is not None and len(works) > 0:
            streams, wakeup, stop = readers.stream(
                [(w.route.table_name, w.query(batch_sql, segment), w.binary) for w in works]
            )
            pending = list(zip(works, streams, strict=True))
            try:
                # Apply tables in the order their reads become ready, not the listed one;
                # the ranges of one table in their own order.
                while pending:
                    heads = []
                    seen: set[str] = set()
                    for i, (work, _stream) in enumerate(pending):
                        if work.route.table_name not in seen:
                            heads.append(i)
                            seen.add(work.route.table_name)
                    pick = heads[next_ready([pending[i][1] for i in heads], wakeup)]
                    work, stream = pending.pop(pick)
                    stats.add(apply_table(conn, stages, work, [stream]))
            finally:
                stop()
        else:
            for work in works:
                chunks = read_chunks(provider, work.query(batch_sql, segment), work.binary)
                stats.add(apply_table(conn, stages, work, [chunks]))
    except psycopg.Error as exc:
        raise ReplayError(error_text(exc)) from None
    stats.sequences = apply_sequences(conn, plan.sequences)
    return stats
