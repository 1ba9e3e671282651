"""Which lake table a replicated table writes, and which format module writes it.

A :class:`LakeSpec` is plain data (picklable, for the initial load's Spark tasks): the
format, where the table lives, the owner marker pgferry writes into it and the
application id under which replay records the versions it committed (exactly once:
``docs/lakehouse.md``).  :func:`pgferry.lake.formats.module` returns the format's
module (:mod:`.delta`, :mod:`.iceberg`), whose functions take the spec.

Replay versions: part ``n`` (0, 1, ...) of a batch ending at tick ``T`` is committed as
version ``T * PARTS + n``; the initial load commits version 0.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgferry.errors import TableError

if TYPE_CHECKING:  # Arrow: imported where rows are read or written
    import pyarrow as pa

FORMATS = ("delta", "iceberg")
OP = "__pgferry_op"  # the stage's op, beside the row's columns in a merge's source
PARTS = 1000  # commits one table may take in one batch (TRUNCATE barriers, ev_id ranges)
# How an Iceberg table's batch replaces and deletes rows (lake_iceberg_deletes).
COPY_ON_WRITE = "copy-on-write"
MERGE_ON_READ = "merge-on-read"
ICEBERG_DELETES = (COPY_ON_WRITE, MERGE_ON_READ)


class LakeError(TableError):
    """A lake table cannot be written or read as asked (one line for the operator)."""


@dataclass(frozen=True)
class LakeSpec:
    format: str  # delta or iceberg
    root: str  # the lake's directory (lake_path or path=)
    schema: str  # the table's schema and name in the lake
    table: str
    owner: str  # queue:node:table, recorded in the lake table
    # The object store's options (lake.storage.options: endpoint, region, credentials),
    # read from the ini or the environment by each command, never stored nor shown.
    storage: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)
    # Iceberg: the SQLite file of the catalog (default: DIR/pgferry_catalog.db; a lake on
    # object storage keeps it on this machine, lake_catalog)
    catalog: str = ""
    # Iceberg: how a batch replaces and deletes rows (COPY_ON_WRITE or MERGE_ON_READ); a
    # setting of the writer, not of the table: both ways read the other's files.
    deletes: str = field(default=MERGE_ON_READ, compare=False)

    @property
    def remote(self) -> bool:
        """Whether the lake is on an object store (a URL) rather than a folder."""
        return "://" in self.root

    @property
    def location(self) -> str:
        """Delta: the table's directory; Iceberg: its data directory in the warehouse."""
        if self.remote:
            return "/".join((self.root.rstrip("/"), self.schema, self.table))
        return os.path.join(self.root, self.schema, self.table)

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def app_id(self) -> str:
        return f"pgferry:{self.owner}"


def quote_ident(name: str) -> str:
    """An identifier in the SQL of a Delta predicate."""
    return '"' + name.replace('"', '""') + '"'


def writable(directory: str) -> None:
    """LakeError unless files can be created in ``directory`` (made when missing)."""
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".pgferry-probe-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("")
        os.unlink(probe)
    except OSError as exc:
        raise LakeError(f"lake path {directory} cannot be written: {exc.strerror}") from None


def rows_kept_after_deletes(here: pa.Table, deletes: pa.Table) -> tuple[list[int], int]:
    """A keyless table's multiset delete: the positions of ``here``'s rows that remain once
    each row image of ``deletes`` (Arrow tables of one schema) has removed one equal row,
    and how many were removed."""
    want = Counter(_frozen(row) for row in deletes.to_pylist())
    kept: list[int] = []
    removed = 0
    for i, row in enumerate(here.to_pylist()):
        image = _frozen(row)
        if want.get(image):
            want[image] -= 1
            removed += 1
        else:
            kept.append(i)
    return kept, removed


def _frozen(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row.values())
