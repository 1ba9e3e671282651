"""The lake load's task: block ranges of one snapshot's table written as Parquet files.

:func:`load_group` is the body of one task of :func:`.lake_copy.copy_to_lake` (and of the
compare's scratch copy, :mod:`.lake_compare`): it imports the exported snapshot, reads each
range and writes it into the lake table's directory, a new file every ``file_rows`` rows,
and returns only the files' names, sizes and rows.  Files are written through pyarrow's
file systems: a local folder, or the object store of ``s3://...`` (the spec's storage
options, :mod:`pgferry.lake.storage`).

When every column's text parses exactly (:func:`pgferry.lake.types.csv_ready`), a range
travels as ``COPY ... TO STDOUT (format csv)`` read with libpq's own calls (psycopg's COPY
iterator costs a Python generator round per row: twice the CPU of the whole read) into
pieces of :data:`PIECE_BYTES`, each parsed by Arrow straight into the lake's types:
timestamps are the server's ISO text (``DateStyle`` set for the transaction), those
with a zone selected ``AT TIME ZONE 'UTC'``, so no ``to_char`` runs per value and no
values are converted after the parse.  A value the lake has no value for (``infinity``,
a year BC) stops the load with one line naming the table.  Other tables (``bytea``,
arrays) are read row by row through a server-side cursor.  A range's rows never all sit
in memory: one piece, or one fetch, at a time.
"""

from __future__ import annotations

import contextlib
import queue
import select
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import pq, sql

from pgferry import expressions
from pgferry.errors import TableError
from pgferry.lake import formats, storage
from pgferry.lake import spec as lake_spec
from pgferry.lake import types as lake_types
from pgferry.pipeline.copy.task import BlockRange
from pgferry.pipeline.snapshot import open_in_snapshot
from pgferry.pipeline.tables import relation

FETCH_ROWS = 20_000  # rows per fetch of the row-by-row path's cursor
PIECE_BYTES = 8 << 20  # CSV text handed to Arrow's parser at a time
# Pieces read by a thread of their own while the last one is parsed and written (Arrow
# lets go of the GIL for both), so the server's COPY never waits for the Parquet writer.
READ_AHEAD = 2
# Parquet as Delta and Spark write it by default: snappy pages.  A dictionary is tried
# only for the columns the plan names (see LakePlan.dictionary).
COMPRESSION = "snappy"
# The transaction's settings that make the server's text what Arrow parses: ISO dates
# (the day order, which reads literals in a copy condition, is kept), floats that read
# back exactly, UTF-8.  TimeZone is left alone: a condition's literals mean what the
# session's zone says; timestamps with a zone are selected AT TIME ZONE 'UTC'.
_TEXT_SETTINGS = sql.SQL(
    "select set_config('DateStyle', 'ISO', true), set_config('extra_float_digits', '3', true),"
    " set_config('client_encoding', 'UTF8', true)"
)


@dataclass(frozen=True)
class LakePlan:
    """What a task needs to load ranges of one table (plain, picklable values)."""

    dest_key: str
    src_schema: str
    src_name: str
    columns: tuple[lake_types.LakeColumn, ...]
    condition: str | None
    tid_ranges: bool
    spec: lake_spec.LakeSpec
    settings: tuple[tuple[str, str], ...] = ()
    # Columns whose values repeat enough for a Parquet dictionary (from the source's
    # statistics); None: every column tries one, as Arrow does by default.
    dictionary: tuple[str, ...] | None = None


@dataclass(frozen=True)
class LakeJob:
    src_connstr: str
    snapshot_id: str
    plans: tuple[LakePlan, ...]
    file_rows: int = 1_000_000  # rows per Parquet file at most


def load_group(job: LakeJob, ranges: list[BlockRange]) -> list[tuple[int, str, int, int]]:
    """Write each range as Parquet files into its lake table's directory; returns
    (plan number, path relative to the table, bytes, rows) per file.  The task's body."""
    conn = open_in_snapshot(job.src_connstr, job.snapshot_id)
    files: dict[int, _Files] = {}  # per table: a task's ranges fill the same files
    try:
        for rng in ranges:
            plan = job.plans[rng.plan_no]
            if rng.plan_no not in files:
                module = formats.module(plan.spec.format)
                store, directory = storage.filesystem(module.data_dir(plan.spec),
                                                      plan.spec.storage)  # fmt: skip
                if not plan.spec.remote:  # a store has no folders to make
                    store.create_dir(directory, recursive=True)
                files[rng.plan_no] = _Files(
                    store, directory, rng, lake_types.arrow_schema(plan.columns),
                    job.file_rows, module.new_file_name, plan.dictionary,
                )  # fmt: skip
            _load_range(plan, rng, conn, files[rng.plan_no])
        return [entry for written in files.values() for entry in written.close()]
    finally:
        conn.close()


def _load_range(plan: LakePlan, rng: BlockRange, conn, files: _Files) -> None:
    schema = files.schema
    where: list[sql.Composable] = []
    if plan.tid_ranges and rng.lo_block is not None:
        where.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({rng.lo_block},0)")))
    if plan.tid_ranges and rng.hi_block is not None:
        where.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({rng.hi_block},0)")))
    if plan.condition:
        where.append(expressions.as_sql(plan.condition))
    for name, value in plan.settings:
        conn.execute("select set_config(%s, %s, true)", (name, value))
    if lake_types.csv_ready(plan.columns):
        conn.execute(_TEXT_SETTINGS)
        query = sql.SQL("copy ({}) to stdout (format csv)").format(
            _select(plan, where, [_csv_select(c) for c in plan.columns])
        )
        # A UTF-8 database's text is valid UTF-8: Arrow need not check it again.
        valid = conn.info.parameter_status("server_encoding") == "UTF8"
        parse = _CsvParser(plan.dest_key, plan.columns, schema, check_utf8=not valid)
        pieces = copy_pieces(conn, query.as_bytes(conn), PIECE_BYTES)
        for piece in read_ahead(pieces, READ_AHEAD) if READ_AHEAD else pieces:
            files.write(parse(piece))
    else:
        query = _select(plan, where, [c.select() for c in plan.columns])
        with conn.cursor(name=f"pgferry_lake_{rng.plan_no}_{rng.range_no}") as cur:
            cur.execute(query)
            while batch := cur.fetchmany(min(FETCH_ROWS, files.file_rows)):
                files.write(lake_types.rows_to_arrow(plan.columns, batch, schema))


def _select(plan: LakePlan, where: list, values: list) -> sql.Composable:
    query = sql.SQL("select {} from {}").format(
        sql.SQL(", ").join(values), relation(plan.src_schema, plan.src_name, not plan.tid_ranges)
    )
    return sql.SQL("{} where {}").format(query, sql.SQL(" and ").join(where)) if where else query


def _csv_select(column: lake_types.LakeColumn) -> sql.Composable:
    """The column as the text Arrow parses: a timestamp with a zone as its UTC time."""
    if column.lake_type == "timestamptz":
        ident = sql.Identifier(column.name)
        return sql.SQL("{0} at time zone 'UTC' as {0}").format(ident)
    return column.select()


def copy_pieces(conn: psycopg.Connection, query: bytes, piece_bytes: int) -> Iterator[bytearray]:
    """The output of a ``COPY ... TO STDOUT`` in pieces of whole rows of at least
    ``piece_bytes`` (the last one shorter), read with libpq's calls; a failed COPY raises
    the server's error once its rows are read."""
    pgconn = conn.pgconn
    poller = select.poll()
    poller.register(pgconn.socket, select.POLLOUT)
    pgconn.send_query(query)
    while pgconn.flush():  # psycopg's connections do not block: the rest when writable
        poller.poll()
    poller.modify(pgconn.socket, select.POLLIN)
    first = _next_result(pgconn, poller)
    if first is None or first.status != pq.ExecStatus.COPY_OUT:
        _raise_results(conn, poller, first)
        raise psycopg.InterfaceError("the COPY did not start")
    piece = bytearray()
    while True:
        # One row per call, from libpq's buffer; wait only when the buffer holds none.
        nbytes, data = pgconn.get_copy_data(1)
        if nbytes > 0:
            piece += data
            if len(piece) >= piece_bytes:
                yield piece
                piece = bytearray()
        elif nbytes == 0:
            poller.poll()
            pgconn.consume_input()
        else:
            break
    if nbytes == -2:
        raise psycopg.OperationalError(pgconn.get_error_message())
    _raise_results(conn, poller, None)
    if piece:
        yield piece


def _next_result(pgconn: pq.abc.PGconn, poller) -> pq.abc.PGresult | None:
    while pgconn.is_busy():
        poller.poll()
        pgconn.consume_input()
    return pgconn.get_result()


def _raise_results(conn: psycopg.Connection, poller, result: pq.abc.PGresult | None) -> None:
    """Read the statement's remaining results; raise the first error among them."""
    error = None
    while True:
        if result is not None and result.status not in (
            pq.ExecStatus.COMMAND_OK, pq.ExecStatus.COPY_OUT
        ):  # fmt: skip
            error = error or result
        result = _next_result(conn.pgconn, poller)
        if result is None:
            break
    if error is not None:
        raise psycopg.errors.error_from_result(error, encoding=conn.info.encoding)


def read_ahead(items: Iterator, depth: int) -> Iterator:
    """``items`` produced by a thread up to ``depth`` ahead of the consumer.  The thread
    ends with the generator: when the consumer stops early or fails, the thread is told
    and joined before this generator closes (it may hold a connection the caller closes
    next)."""
    ahead: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        ahead.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ahead.put((done, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            ahead.put((done, exc))

    thread = threading.Thread(target=produce, name="pgferry-lake-read", daemon=True)
    thread.start()
    try:
        while True:
            item, error = ahead.get()
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        with contextlib.suppress(queue.Empty):  # let a blocked put see the stop
            while True:
                ahead.get_nowait()
        thread.join()


class _CsvParser:
    """PostgreSQL's CSV text of whole rows as an Arrow table of ``schema``."""

    def __init__(
        self, table: str, columns: Sequence[lake_types.LakeColumn], schema,
        check_utf8: bool = True,
    ) -> None:  # fmt: skip
        import pyarrow as pa
        import pyarrow.csv as pcsv

        self.table, self.schema = table, schema
        # One thread: the load runs a task per core already.
        self.read = pcsv.ReadOptions(column_names=[c.name for c in columns], use_threads=False)
        # Only text can hold a newline (quoted); scanning for it costs the parser.
        self.parse = pcsv.ParseOptions(
            newlines_in_values=any(c.lake_type == "string" for c in columns)
        )
        # A timestamp with a zone arrives as its UTC time without an offset.
        self.utc = {c.name for c in columns if c.lake_type == "timestamptz"}
        self.convert = pcsv.ConvertOptions(
            column_types={c.name: pa.timestamp("us") if c.name in self.utc
                          else schema.field(c.name).type for c in columns},
            null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=False,
            true_values=["t"], false_values=["f"], check_utf8=check_utf8,
        )  # fmt: skip

    def __call__(self, piece: bytearray):
        import pyarrow as pa
        import pyarrow.csv as pcsv

        try:
            table = pcsv.read_csv(pa.py_buffer(piece), self.read, self.parse, self.convert)
        except pa.ArrowInvalid as exc:  # a value without a lake value: infinity, a BC year
            raise TableError(f"{self.table}: {str(exc).splitlines()[0]}") from None
        columns = [
            column.cast(field.type) if field.name in self.utc else column
            for column, field in zip(table.columns, self.schema, strict=True)
        ]  # a cast that only names the zone: the values stay as they are
        return pa.Table.from_arrays(columns, schema=self.schema)


class _Files:
    """Parquet files of one table's ranges in one task, a new one every ``file_rows``
    rows (named after the task's first range)."""

    def __init__(
        self, store, directory, rng: BlockRange, schema, file_rows: int, name, dictionary
    ) -> None:
        self.store, self.directory, self.rng, self.schema = store, directory, rng, schema
        self.file_rows, self.name = file_rows, name
        self.dictionary = True if dictionary is None else list(dictionary)
        self.writer, self.path, self.rows = None, "", 0
        self.done: list[tuple[int, str, int, int]] = []

    def write(self, table) -> None:
        import pyarrow.parquet as pq_file

        while table.num_rows:
            if self.writer is None:
                self.path = self.name(self.rng.range_no)
                self.writer = pq_file.ParquetWriter(
                    f"{self.directory}/{self.path}", self.schema, filesystem=self.store,
                    compression=COMPRESSION, use_dictionary=self.dictionary,
                )  # fmt: skip
            room = self.file_rows - self.rows
            self.writer.write_table(table.slice(0, room))
            self.rows += min(room, table.num_rows)
            table = table.slice(room)
            if self.rows >= self.file_rows:
                self._finish()

    def _finish(self) -> None:
        assert self.writer is not None
        self.writer.close()
        size = self.store.get_file_info(f"{self.directory}/{self.path}").size
        self.done.append((self.rng.plan_no, self.path, size, self.rows))
        self.writer, self.rows = None, 0

    def close(self) -> list[tuple[int, str, int, int]]:
        if self.writer is not None:
            self._finish()
        return self.done
