"""What a lake format does (:class:`LakeFormat`), and the module of one, imported when
first asked for.

Above :mod:`.delta` and :mod:`.iceberg` (which import only :mod:`.spec`): the format's
package (``deltalake``, ``pyiceberg``) is loaded only by a node that uses that format, and
a missing one is one line naming the extra to install.  Each format is a module, not a
class: :class:`LakeFormat` is the protocol both modules satisfy, which mypy checks where
:func:`module` hands them out, so that a function one format lacks, or takes other
arguments in, is found without a lake.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from pgferry.lake import storage
from pgferry.lake.spec import FORMATS, LakeError, LakeSpec

if TYPE_CHECKING:
    import pyarrow as pa


class LakeFormat(Protocol):
    """Every read and write of one format's tables, each taking the table's
    :class:`~.spec.LakeSpec`.  Rows travel as Arrow tables; a commit records the replay
    version and tick (and the provider's time of the tick) it brings the table to.

    Replay (``handlers/lake.py``): :meth:`merge` (a keyed table's batch: the op column
    first, ``I``/``U`` upsert, ``D``/``d`` delete), :meth:`multiset` (a keyless one's),
    :meth:`truncate`, :meth:`applied_version` and :meth:`newest_tick` (where a table
    stands), :meth:`tick_time_of`, :meth:`maintain` (compaction every so many commits).
    The initial load (``pipeline/lake_copy.py``): :meth:`prepare`, :meth:`data_dir` and
    :meth:`new_file_name` for the tasks' Parquet files, :meth:`commit_files`.  Compare and
    repair (``sync/``): :meth:`read` at a tick, :meth:`repair`.
    """

    def check_installed(self) -> None:
        """LakeError naming the extra to install when the format's package is missing."""

    def owner_of(self, spec: LakeSpec) -> str | None:
        """The node that owns the table (None: no table, or not pgferry's)."""

    def key_of(self, spec: LakeSpec) -> list[str] | None:
        """The key recorded with the table (None: none recorded)."""

    def record_key(self, spec: LakeSpec, key: Sequence[str]) -> None: ...

    def prepare(self, spec: LakeSpec, schema: pa.Schema, key: Sequence[str]) -> None:
        """The table made (or checked) with ``schema`` and ``key``, owned by spec's owner."""

    def applied_version(self, spec: LakeSpec) -> int | None: ...

    def arrow_schema(self, spec: LakeSpec) -> pa.Schema: ...

    def add_columns(self, spec: LakeSpec, fields: Sequence[pa.Field]) -> None: ...

    def merge(
        self,
        spec: LakeSpec,
        source: pa.Table,
        key: Sequence[str],
        version: int,
        tick: int,
        tick_time: datetime | None = None,
    ) -> tuple[int, int]:
        """One commit of a keyed batch: (rows written, rows deleted)."""

    def append(
        self,
        spec: LakeSpec,
        rows: pa.Table,
        version: int | None,
        tick: int | None,
        tick_time: datetime | None = None,
    ) -> int: ...

    def multiset(
        self,
        spec: LakeSpec,
        inserts: pa.Table,
        deletes: pa.Table,
        version: int | None,
        tick: int,
        tick_time: datetime | None = None,
    ) -> tuple[int, int]:
        """One commit of a keyless batch: (rows inserted, rows deleted)."""

    def truncate(self, spec: LakeSpec, version: int, tick: int) -> int: ...

    def data_dir(self, spec: LakeSpec) -> str: ...

    def new_file_name(self, range_no: int) -> str: ...

    def commit_files(
        self, spec: LakeSpec, files: Sequence[tuple[str, int, int]], schema: pa.Schema, tick: int
    ) -> None: ...

    def read(self, spec: LakeSpec, tick: int | None = None) -> pa.Table: ...

    def maintain(self, spec: LakeSpec, compact_every: int, keep_hours: int) -> bool: ...

    def compact(self, spec: LakeSpec, keep_hours: int | None = None) -> dict[str, Any]: ...

    def tick_time_of(self, spec: LakeSpec, tick: int) -> datetime | None: ...

    def newest_tick(self, spec: LakeSpec) -> int | None: ...

    def repair(
        self, spec: LakeSpec, source: pa.Table, key: Sequence[str], version: int | None, tick: int
    ) -> None:
        """One commit of repair's fix (the op column first, as :meth:`merge` takes it)."""


# What each format leaves in a table's directory: found without the format's package.
_FOOTPRINTS = {"delta": "_delta_log", "iceberg": "metadata"}


def module(fmt: str) -> LakeFormat:
    """The format's module (LakeError when its package is missing)."""
    found: LakeFormat  # mypy checks here that each module satisfies the protocol
    if fmt == "delta":
        from pgferry.lake import delta

        found = delta
    elif fmt == "iceberg":
        from pgferry.lake import iceberg

        found = iceberg
    else:
        raise LakeError(f"unknown lake format {fmt!r} (known: {', '.join(FORMATS)})")
    found.check_installed()
    return found


def other_format(spec: LakeSpec) -> tuple[str, str] | None:
    """(format, owner) of a table of another format at ``spec``'s location (owner "" when
    it is not known: not pgferry's, or that format's package is missing here), None when
    there is none. Two formats in one directory would read and delete each other's files."""
    for fmt, footprint in _FOOTPRINTS.items():
        if fmt == spec.format or not storage.is_dir(
            storage.join(spec.location, footprint), spec.storage
        ):
            continue
        try:
            owner = module(fmt).owner_of(dataclasses.replace(spec, format=fmt))
        except LakeError:  # the package is missing: the files say enough
            owner = ""
        return fmt, owner or ""
    return None
