"""What replay hands a handler and what it hands back: the table, its stage, the counts.

The plain data of the handler contract (:mod:`.api` re-exports it for handler authors).
It sits below both :mod:`.api` and the set-based applies (:mod:`.upsert`,
:mod:`.unkeyed`), so that the default :meth:`Handler.apply <.api.Handler.apply>` can call
them while they read only these types: the applies import no handler class.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import psycopg
from psycopg import sql

Mode = Literal["rows", "events"]


@dataclass(frozen=True)
class Target:
    """The table a handler works on, on this node."""

    table_name: str  # the queue-visible name (ev_extra1), ``%I.%I``
    dest_schema: str  # the local table (for a handler without a table: the same name)
    dest_name: str
    dest_fq: str  # the local table as format('%I.%I') writes it
    pk: tuple[str, ...]  # its primary key (empty without a local table)
    columns: tuple[str, ...]  # the columns staged: the destination's the source also has
    # The table's capture has no key at all: rows are staged as 'I' / 'D' copies of whole
    # row images (pgferry.handlers.unkeyed), pk is empty.
    keyless: bool = False
    key_unique: bool = True  # the destination has a unique index on pk (ON CONFLICT)

    @property
    def dest(self) -> sql.Identifier:
        return sql.Identifier(self.dest_schema, self.dest_name)

    @property
    def dest_text(self) -> str:
        return f"{self.dest_schema}.{self.dest_name}"


@dataclass
class Staged:
    """One table's part of a batch, staged for :meth:`Handler.apply`.

    ``relation`` is a temporary table (``pg_temp.ferry_stage_N``) of ``conn``, inside the
    transaction that applies the whole batch and records its tick: read it, never drop or
    alter it (it is emptied after the call and reused), never commit or roll back
    ``conn`` (savepoints, ``with conn.transaction()``, are fine).  An error raised here
    rolls the batch back and the worker retries it.
    """

    conn: psycopg.Connection
    relation: sql.Composable
    rows: int  # rows in the stage
    target: Target
    mode: Mode
    tick_id: int  # the tick this batch ends at (the node records it in the same transaction)
    inserts_only: bool = False  # rows mode: every event of the table was an insert
    # Rows mode: some events were inserts (a key new in the batch then arrives collapsed as
    # 'U' or 'D', so a row missing here cannot be told from one inserted in the batch).
    some_inserts: bool = True
    filtered: bool = False  # rows mode: a row filter turned images that fail it into 'D'
    tick_time: datetime | None = None  # the time of that tick: the batch's time
    # Rows mode: some events were deletes.  Without them (and without a row filter) the
    # stage holds no 'D' or 'd' row, and no delete statement is needed.
    some_deletes: bool = True


@dataclass
class Applied:
    """What :meth:`Handler.apply` did, for the worker's log and metrics."""

    upserts: int = 0  # rows written (or events handled, for an events handler)
    deletes: int = 0  # rows removed
    recreated: int = 0  # updates that found no row here and inserted it (divergence)
    missing_deletes: int = 0  # deletes that found no row here (divergence)
