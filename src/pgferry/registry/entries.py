"""The replication registry of one node: ``ferry.table_info`` and ``ferry.seq_info``.

Plain reads and writes shared by the admin commands and the worker.  Table states follow the
original: NULL (copy pending) -> 'in-copy' -> 'catching-up' -> 'ok'.  Everything runs in the
caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

MERGE_STATES = (None, "in-copy", "catching-up", "ok")
_KEEP: Any = object()  # "leave this column as it is"


@dataclass
class TableEntry:
    """One row of ``ferry.table_info``."""

    queue_name: str
    table_name: str
    local: bool
    merge_state: str | None
    dest_table: str | None
    copy_condition: str | None
    copy_snapshot: str | None
    skip_truncate: bool
    table_attrs: dict[str, Any] = field(default_factory=dict)
    copy_group: int | None = None
    max_parallel_copy: int | None = None

    @property
    def dest_name(self) -> str:
        """The local table events are applied to (``%I.%I`` form)."""
        return self.dest_table or self.table_name

    def display_attrs(self) -> dict[str, Any]:
        """table_attrs as ``tables`` shows them (with dest_table when renamed)."""
        attrs = dict(self.table_attrs)
        capture = attrs.get("capture")
        if isinstance(capture, dict) and set(capture) <= {"key"}:
            del attrs["capture"]  # captured by the primary key, without options: as always
        if self.dest_table:
            attrs.setdefault("dest_table", self.dest_table)
        return attrs


@dataclass
class SeqEntry:
    """One row of ``ferry.seq_info``."""

    queue_name: str
    seq_name: str
    local: bool
    last_value: int | None


_TABLE_COLS = """queue_name, table_name, local, merge_state, dest_table, copy_condition,
    copy_snapshot::text as copy_snapshot, skip_truncate, table_attrs, copy_group,
    max_parallel_copy"""


def is_installed(conn: psycopg.Connection) -> bool:
    """Whether the database holds pgferry's registry (a queue's provider may not: a queue
    filled by an application)."""
    row = conn.execute("select to_regclass('ferry.table_info') is not null").fetchone()
    return bool(row and row[0])


def list_tables(conn: psycopg.Connection, queue: str, local_only: bool = True) -> list[TableEntry]:
    with conn.cursor(row_factory=class_row(TableEntry)) as cur:
        cur.execute(
            f"""
            select {_TABLE_COLS} from ferry.table_info
             where queue_name = %s and (local or not %s)
             order by table_name
            """,
            (queue, local_only),
        )
        return cur.fetchall()


def get_table(conn: psycopg.Connection, queue: str, table: str) -> TableEntry | None:
    with conn.cursor(row_factory=class_row(TableEntry)) as cur:
        cur.execute(
            f"select {_TABLE_COLS} from ferry.table_info where queue_name = %s and table_name = %s",
            (queue, table),
        )
        return cur.fetchone()


def every_table(conn: psycopg.Connection) -> list[TableEntry]:
    """Every row of ``ferry.table_info``, of every queue of the database."""
    with conn.cursor(row_factory=class_row(TableEntry)) as cur:
        cur.execute(f"select {_TABLE_COLS} from ferry.table_info order by queue_name, table_name")
        return cur.fetchall()


def table_at(conn: psycopg.Connection, queue: str, fq: str) -> TableEntry | None:
    """The local entry of ``queue`` whose destination is the table ``fq`` (any spelling
    of its name), or None."""
    with conn.cursor(row_factory=class_row(TableEntry)) as cur:
        cur.execute(
            f"""
            select {_TABLE_COLS} from ferry.table_info
             where queue_name = %s and local
               and to_regclass(coalesce(dest_table, table_name)) = to_regclass(%s)
            """,
            (queue, fq),
        )
        return cur.fetchone()


def without_destination(conn: psycopg.Connection, queue: str) -> list[TableEntry]:
    """Local entries of ``queue`` whose destination table does not exist in the database
    (dropped without remove-table), by destination name."""
    with conn.cursor(row_factory=class_row(TableEntry)) as cur:
        cur.execute(
            f"""
            select {_TABLE_COLS} from ferry.table_info
             where queue_name = %s and local
               and to_regclass(coalesce(dest_table, table_name)) is null
             order by coalesce(dest_table, table_name)
            """,
            (queue,),
        )
        return cur.fetchall()


def not_settled(conn: psycopg.Connection, queue: str, tables: list[str]) -> list[str]:
    """Those of ``tables`` registered for ``queue`` in another state than ``ok``."""
    rows = conn.execute(
        """
        select table_name from ferry.table_info
         where queue_name = %s and table_name = any(%s) and merge_state is distinct from 'ok'
         order by table_name
        """,
        (queue, tables),
    ).fetchall()
    return [r[0] for r in rows]


@dataclass(frozen=True)
class TableCounts:
    """How many local tables of a queue are in each state (``status``)."""

    ok: int
    copying: int  # in-copy or catching-up
    other: int  # waiting for their copy


def table_counts(conn: psycopg.Connection, queue: str) -> TableCounts:
    """The local tables of ``queue`` counted by state."""
    with conn.cursor(row_factory=class_row(TableCounts)) as cur:
        cur.execute(
            """
            select count(*) filter (where merge_state = 'ok') as ok,
                   count(*) filter (where merge_state in ('in-copy', 'catching-up'))
                       as copying,
                   count(*) filter (where merge_state is null
                                       or merge_state not in ('ok', 'in-copy', 'catching-up'))
                       as other
              from ferry.table_info where queue_name = %s and local
            """,
            (queue,),
        )
        row = cur.fetchone()
    assert row is not None  # an aggregate without GROUP BY: one row
    return row


def next_copy_group(conn: psycopg.Connection) -> int:
    row = conn.execute("select nextval('ferry.copy_group_seq')").fetchone()
    assert row is not None
    group: int = row[0]
    return group


def register_table(conn: psycopg.Connection, entry: TableEntry) -> None:
    """Insert or replace a table's row (``local`` registration)."""
    conn.execute(
        """
        insert into ferry.table_info
            (queue_name, table_name, local, merge_state, dest_table, copy_condition,
             copy_snapshot, skip_truncate, table_attrs, copy_group, max_parallel_copy)
        values (%s, %s, %s, %s, %s, %s, %s::pg_snapshot, %s, %s, %s, %s)
        on conflict (queue_name, table_name) do update set
            local = excluded.local, merge_state = excluded.merge_state,
            dest_table = excluded.dest_table, copy_condition = excluded.copy_condition,
            copy_snapshot = excluded.copy_snapshot, skip_truncate = excluded.skip_truncate,
            table_attrs = excluded.table_attrs, copy_group = excluded.copy_group,
            max_parallel_copy = excluded.max_parallel_copy
        """,
        (
            entry.queue_name,
            entry.table_name,
            entry.local,
            entry.merge_state,
            entry.dest_table,
            entry.copy_condition,
            entry.copy_snapshot,
            entry.skip_truncate,
            Jsonb(entry.table_attrs),
            entry.copy_group,
            entry.max_parallel_copy,
        ),
    )


def set_table_attrs(
    conn: psycopg.Connection, queue: str, table: str, attrs: dict[str, Any]
) -> None:
    """Replace a table's table_attrs, nothing else of its row."""
    conn.execute(
        "update ferry.table_info set table_attrs = %s where queue_name = %s and table_name = %s",
        (Jsonb(attrs), queue, table),
    )


def rename_table(conn: psycopg.Connection, queue: str, old: str, new: str) -> bool:
    """Follow a rename of the source table: the entry's queue name becomes ``new``; its
    local name (``dest_table``, when it has one of its own) stays."""
    cur = conn.execute(
        "update ferry.table_info set table_name = %s where queue_name = %s and table_name = %s",
        (new, queue, old),
    )
    return cur.rowcount > 0


def unregister_table(conn: psycopg.Connection, queue: str, table: str) -> bool:
    cur = conn.execute(
        "delete from ferry.table_info where queue_name = %s and table_name = %s", (queue, table)
    )
    return cur.rowcount > 0


def set_merge_state(
    conn: psycopg.Connection,
    queue: str,
    table: str,
    state: str | None,
    snapshot: str | None = _KEEP,
) -> None:
    """Move a table to ``state``; ``snapshot`` (pg_snapshot text) is stored when given.

    The worker owns every transition except the admin ones (add, resync).
    """
    if state not in MERGE_STATES:
        raise ValueError(f"bad merge_state: {state!r}")
    if snapshot is _KEEP:
        conn.execute(
            """
            update ferry.table_info set merge_state = %s
             where queue_name = %s and table_name = %s
            """,
            (state, queue, table),
        )
    else:
        conn.execute(
            """
            update ferry.table_info set merge_state = %s, copy_snapshot = %s::pg_snapshot
             where queue_name = %s and table_name = %s
            """,
            (state, snapshot, queue, table),
        )


def set_copy_snapshot(
    conn: psycopg.Connection, queue: str, table: str, snapshot: str | None
) -> None:
    conn.execute(
        """
        update ferry.table_info set copy_snapshot = %s::pg_snapshot
         where queue_name = %s and table_name = %s
        """,
        (snapshot, queue, table),
    )


def resync_tables(
    conn: psycopg.Connection,
    queue: str,
    tables: list[str],
    copy_node: str | None = None,
    copy_mode: str | None = None,
) -> int:
    """Put ``tables`` back to copy-pending as one copy group; returns the group id.

    ``copy_node`` (table_attrs, as add-table stores it) is set, or removed when None: the
    copy reads from the provider unless the resync names a copy node again.  ``copy_mode``
    (``--copy-mode``) replaces the stored one when given.
    """
    group = next_copy_group(conn)
    conn.execute(
        """
        update ferry.table_info
           set merge_state = null, copy_snapshot = null, copy_group = %s,
               table_attrs = case when %s::text is null then table_attrs - 'copy_node'
                                  else table_attrs || jsonb_build_object('copy_node', %s::text)
                             end
                             || case when %s::text is null then '{}'::jsonb
                                     else jsonb_build_object('copy_mode', %s::text) end
         where queue_name = %s and table_name = any(%s)
        """,
        (group, copy_node, copy_node, copy_mode, copy_mode, queue, tables),
    )
    return group


def list_seqs(conn: psycopg.Connection, queue: str, local_only: bool = True) -> list[SeqEntry]:
    with conn.cursor(row_factory=class_row(SeqEntry)) as cur:
        cur.execute(
            """
            select queue_name, seq_name, local, last_value from ferry.seq_info
             where queue_name = %s and (local or not %s) order by seq_name
            """,
            (queue, local_only),
        )
        return cur.fetchall()


# The node's replicated sequences (parameter: the queue name); the worker reads it with the
# other reads of its loop, in one statement.
SEQUENCES_SQL = (
    "select seq_name from ferry.seq_info where queue_name = %s and local order by seq_name"
)


@dataclass(frozen=True)
class SeqPosition:
    """A local sequence of a queue as the database has it: where it stands, the value
    recorded for it (published on a root, applied on a subscriber), its step and maximum."""

    seq_name: str
    position: int
    published: int | None
    step: int
    maxvalue: int


def seq_positions(conn: psycopg.Connection, queue: str, *, lock: bool = False) -> list[SeqPosition]:
    """The local sequences of ``queue`` that exist; ``lock`` takes their ``seq_info`` rows."""
    with conn.cursor(row_factory=class_row(SeqPosition)) as cur:
        cur.execute(
            """
            select s.seq_name,
                   coalesce(pg_sequence_last_value(p.seqrelid), p.seqstart) as position,
                   s.last_value as published, greatest(p.seqincrement, 1) as step,
                   p.seqmax as maxvalue
              from ferry.seq_info s
              join pg_sequence p on p.seqrelid = to_regclass(s.seq_name)
             where s.queue_name = %s and s.local
             order by s.seq_name
            """
            + (" for update of s" if lock else ""),
            (queue,),
        )
        return cur.fetchall()


def advance_seq(conn: psycopg.Connection, queue: str, seq: str, value: int) -> None:
    """Move a local sequence up to ``value`` (never back, ``ferry.seq_advance``) and record
    the value for ``queue``."""
    conn.execute("select ferry.seq_advance(%s::regclass, %s)", (seq, value))
    set_seq_last_value(conn, queue, seq, value)


# What a queue's registry holds, as one text that changes whenever a row does (the
# worker's idle check reads it with the node's; parameter {q}: the queue).  xmin changes
# with every insert and update of a row, a deleted row drops out of the text; a sequence
# adds its position.
STAMP = sql.SQL(
    """concat_ws('|',
         (select string_agg(concat_ws(',', t.table_name, t.xmin), ';' order by t.table_name)
            from ferry.table_info t where t.queue_name = {q}),
         (select string_agg(concat_ws(',', s.seq_name, s.xmin,
                                      pg_sequence_last_value(to_regclass(s.seq_name))),
                            ';' order by s.seq_name)
            from ferry.seq_info s where s.queue_name = {q}))"""
)


def register_seq(
    conn: psycopg.Connection, queue: str, seq: str, last_value: int | None, local: bool = True
) -> None:
    conn.execute(
        """
        insert into ferry.seq_info (queue_name, seq_name, local, last_value)
        values (%s, %s, %s, %s)
        on conflict (queue_name, seq_name)
        do update set local = excluded.local, last_value = excluded.last_value
        """,
        (queue, seq, local, last_value),
    )


def unregister_seq(conn: psycopg.Connection, queue: str, seq: str) -> bool:
    cur = conn.execute(
        "delete from ferry.seq_info where queue_name = %s and seq_name = %s", (queue, seq)
    )
    return cur.rowcount > 0


def set_seq_last_value(conn: psycopg.Connection, queue: str, seq: str, value: int) -> None:
    """Record a sequence value; never moves it backwards."""
    conn.execute(
        """
        update ferry.seq_info set last_value = greatest(coalesce(last_value, %s), %s)
         where queue_name = %s and seq_name = %s
        """,
        (value, value, queue, seq),
    )


def set_seq_published(conn: psycopg.Connection, queue: str, seq: str, value: int) -> None:
    """Record the value a root just published for a sequence (as sent, even below the
    record: the root's sequence was set back)."""
    conn.execute(
        "update ferry.seq_info set last_value = %s where queue_name = %s and seq_name = %s",
        (value, queue, seq),
    )


def forget_queue(conn: psycopg.Connection, queue: str) -> None:
    """Every table and sequence row of ``queue``, its pending compare requests and its
    ``capture-ddl`` switch (its node is dropped; the database's event triggers stay, idle)."""
    conn.execute("delete from ferry.table_info where queue_name = %s", (queue,))
    conn.execute("delete from ferry.seq_info where queue_name = %s", (queue,))
    conn.execute("delete from ferry.sync_request where queue_name = %s", (queue,))
    conn.execute("delete from ferry.ddl_capture where queue_name = %s", (queue,))


def attrs_text(attrs: dict[str, Any]) -> str:
    """``{'copy_condition': 'userid<1000'}`` as the original's ``tables`` printed it."""
    return repr(attrs) if attrs else ""


@dataclass(frozen=True)
class CopyProgress:
    """Where the copy of one table stands: rows copied so far of the source's estimate."""

    table_name: str
    merge_state: str | None
    rows: int
    total: int | None  # the source's estimated rows (None: unknown, e.g. a copy condition)
    seconds: float  # since the copy started
    error: str | None  # the last failure, until the copy is tried again
    source: str | None = None  # the copy node it reads from (None: the provider)
    chunks_done: int = 0  # a chunked copy's chunks copied so far
    chunks_total: int = 0  # and planned (0: a one-snapshot copy)

    def text(self) -> str:
        """``12,000/50,000 rows (24%, ETA 40s)``, or the failure; ``from NODE: ...`` when
        the copy reads from another node than the provider; a chunked copy adds its chunks
        and rate (``, chunk 3/10, 4,000 rows/s``)."""
        base = self._rows_text()
        if self.chunks_total and self.merge_state == "in-copy" and not self.error:
            rate = f", {self.rows / self.seconds:,.0f} rows/s" if self.seconds > 0 else ""
            base += f", chunk {self.chunks_done}/{self.chunks_total}{rate}"
        return base

    def _rows_text(self) -> str:
        if self.error and self.merge_state != "catching-up":
            return f"copy failed: {self.error}"
        if self.merge_state is None:
            return "waiting for copy"
        where = f"from {self.source}: " if self.source else ""
        if self.merge_state == "catching-up":
            return f"{where}copied {self.rows:,} rows, catching up"
        done = f"{self.rows:,}"
        if not self.total:
            return f"{where}{done} rows"
        share = min(self.rows / self.total, 1.0)
        eta = ""
        if self.rows and self.seconds > 0 and share < 1.0:
            left = (self.total - self.rows) / (self.rows / self.seconds)
            eta = f", ETA {int(left) // 60}m{int(left) % 60:02d}s"
        return f"{where}{done}/{self.total:,} rows ({share:.0%}{eta})"


def copy_progress(conn: psycopg.Connection, queue: str) -> list[CopyProgress]:
    """Tables of ``queue`` not yet ``ok`` here, with their copy's progress.

    Rows done are counted in ``ferry_copy.range_done`` (each copied range is recorded there
    when it commits), so the figure moves in steps of one range.
    """
    have_bookkeeping = conn.execute(
        "select to_regclass('ferry_copy.range_done') is not null"
    ).fetchone()
    done = (
        """(select coalesce(sum(r.rows), 0) from ferry_copy.range_done r
             where r.copy_id = t.copy_id
               and r.dest_table = coalesce(t.dest_table, t.table_name))"""
        if have_bookkeeping and have_bookkeeping[0]
        else "0"
    )
    has_source = conn.execute(
        "select exists (select 1 from pg_attribute where attrelid = 'ferry.table_info'::regclass"
        " and attname = 'copy_source' and not attisdropped)"
    ).fetchone()
    # status reads other members too, which may not have installed ferry 092 yet.
    source = "t.copy_source" if has_source and has_source[0] else "null"
    have_chunks = conn.execute("select to_regclass('ferry_copy.chunk') is not null").fetchone()
    chunks = (
        """(select count(*) from ferry_copy.range_done r
             where r.copy_id = t.copy_id
               and r.dest_table = coalesce(t.dest_table, t.table_name))::int as chunks_done,
           (select count(*) from ferry_copy.chunk c
             where c.copy_id = t.copy_id
               and c.dest_table = coalesce(t.dest_table, t.table_name))::int as chunks_total"""
        if have_chunks and have_chunks[0]
        else "0 as chunks_done, 0 as chunks_total"
    )
    query = sql.SQL(
        """
        select t.table_name, t.merge_state, ({done})::bigint as rows, t.copy_total as total,
               coalesce(extract(epoch from now() - t.copy_started), 0)::float8 as seconds,
               t.copy_error as error, {source} as source, {chunks}
          from ferry.table_info t
         where t.queue_name = %s and t.local and t.merge_state is distinct from 'ok'
         order by t.table_name
        """
    ).format(done=sql.SQL(done), source=sql.SQL(source), chunks=sql.SQL(chunks))
    with conn.cursor(row_factory=class_row(CopyProgress)) as cur:
        return cur.execute(query, (queue,)).fetchall()
