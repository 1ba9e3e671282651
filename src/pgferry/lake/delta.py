"""Delta Lake tables through delta-rs (the ``deltalake`` package): no JVM.

Every write here is ONE Delta commit that carries the application transaction
``(app id, version)`` of the table's replay (:class:`~pgferry.lake.spec.LakeSpec`): delta-rs
writes the ``txn`` action in the same log entry as the data, so the version a table has
recorded says exactly which parts of which batches it holds.  Replay asks
:func:`applied_version` before writing and skips a part the table already has.  The
commit's metadata records the batch's tick and the provider's time of it
(``pgferry.tick``, ``pgferry.tick_time``: :func:`tick_time_of`).

The table's description holds pgferry's owner marker and the key the table was made for
(JSON, :func:`owner_of`, :func:`key_of`): a Delta table pgferry did not create, one
another node's table writes, or one made for another key is refused.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from pgferry.lake.spec import OP, LakeError, LakeSpec, quote_ident, rows_kept_after_deletes

if TYPE_CHECKING:  # deltalake and Arrow: imported by a node that has Delta tables
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake._internal import RemoveAction
    from deltalake.transaction import CommitProperties

TICK_TIME = "pgferry.tick_time"  # the provider's time of the commit's tick (ISO 8601)


def _dl() -> ModuleType:  # deltalake, imported when first needed
    try:
        import deltalake
    except ImportError:
        raise LakeError(
            "lake format delta needs the deltalake package: pip install 'pgferry[lake]'"
        ) from None
    return deltalake


def check_installed() -> None:
    _dl()


def _props(spec: LakeSpec, version: int | None, tick: int | None,
           tick_time: datetime | None = None) -> CommitProperties:  # fmt: skip
    from deltalake.transaction import CommitProperties, Transaction

    apps = [Transaction(spec.app_id, version)] if version is not None else None
    meta: dict[str, object] | None = {"pgferry.tick": tick} if tick is not None else None
    if meta is not None and tick_time is not None:
        meta[TICK_TIME] = tick_time.isoformat()
    return CommitProperties(app_transactions=apps, custom_metadata=meta)


def _opts(spec: LakeSpec) -> dict[str, str] | None:
    """delta-rs's storage options of the spec's store (None: a local folder)."""
    if not spec.remote:
        return None
    from pgferry.lake import storage

    return storage.delta_options(spec.storage)


def _exists(spec: LakeSpec) -> bool:
    try:
        found: bool = _dl().DeltaTable.is_deltatable(spec.location, storage_options=_opts(spec))
        return found
    except OSError as exc:  # the store answered with an error, or not at all
        raise _store_error(spec, exc) from None


def _store_error(spec: LakeSpec, exc: BaseException) -> LakeError:
    from pgferry.lake import storage

    return LakeError(
        f"lake table {storage.mask(spec.location, spec.storage)} cannot be reached:"
        f" {storage.reason(exc, spec.storage)}"
    )


def owner_of(spec: LakeSpec) -> str | None:
    """The owner recorded in the Delta table at the spec's location; "" when a table is
    there that pgferry did not make, None when there is none."""
    if not _exists(spec):
        return None
    return str(_marker(spec).get("pgferry", ""))


def _marker(spec: LakeSpec) -> dict[str, Any]:
    if not _exists(spec):
        return {}
    try:
        marker = json.loads(_table(spec).metadata().description or "")
    except ValueError:
        return {}
    return marker if isinstance(marker, dict) else {}


def key_of(spec: LakeSpec) -> list[str] | None:
    """The key the table was made for (None: not recorded, a table of an older pgferry)."""
    key = _marker(spec).get("key")
    return list(key) if isinstance(key, list) else None


def record_key(spec: LakeSpec, key: Sequence[str]) -> None:
    """Record ``key`` beside the owner marker (one commit of the description)."""
    marker = {**_marker(spec), "pgferry": spec.owner, "key": list(key)}
    _table(spec).alter.set_table_description(json.dumps(marker))


def prepare(spec: LakeSpec, schema: pa.Schema, key: Sequence[str]) -> None:
    """Create the empty table with the owner marker and its key, unless it is there
    (checked before)."""
    if _exists(spec):
        return
    if not spec.remote:
        os.makedirs(spec.location, exist_ok=True)
    _dl().DeltaTable.create(
        spec.location, schema, mode="ignore", name=spec.name,
        description=json.dumps({"pgferry": spec.owner, "key": list(key)}),
        storage_options=_opts(spec),
    )  # fmt: skip


def _table(spec: LakeSpec) -> DeltaTable:
    if not _exists(spec):
        raise LakeError(f"no Delta table at {spec.location} (was it removed?)")
    table: DeltaTable = _dl().DeltaTable(spec.location, storage_options=_opts(spec))
    return table


def applied_version(spec: LakeSpec) -> int | None:
    """The newest replay version the table has committed (None: none yet)."""
    return _table(spec).transaction_version(spec.app_id)


def arrow_schema(spec: LakeSpec) -> pa.Schema:
    """The table's columns as an Arrow schema."""
    import pyarrow as pa

    return pa.schema(_table(spec).schema().to_arrow())


def add_columns(spec: LakeSpec, fields: Sequence[pa.Field]) -> None:
    """Add ``fields`` (Arrow fields, nullable) to the table, in one commit."""
    dl = _dl()
    _table(spec).alter.add_columns([dl.Field.from_arrow(f) for f in fields])


def merge(spec: LakeSpec, source: pa.Table, key: Sequence[str], version: int, tick: int,
          tick_time: datetime | None = None) -> tuple[int, int]:  # fmt: skip
    """One MERGE of collapsed rows on the key: ``source`` is an Arrow table of the columns
    with the op first (I, U: upsert; D, d: delete).  Returns (rows written, deleted)."""
    dt = _table(spec)
    on = " and ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key)
    deletes = f"s.{OP} in ('D', 'd')"
    upserts = f"s.{OP} not in ('D', 'd')"
    metrics = (
        dt.merge(source, on, source_alias="s", target_alias="t",
                 commit_properties=_props(spec, version, tick, tick_time))
        .when_matched_delete(deletes)
        .when_matched_update_all(upserts, except_cols=[OP])
        .when_not_matched_insert_all(upserts, except_cols=[OP])
        .execute()
    )  # fmt: skip
    written = metrics.get("num_target_rows_inserted", 0) + metrics.get("num_target_rows_updated", 0)
    return written, metrics.get("num_target_rows_deleted", 0)


def append(spec: LakeSpec, rows: pa.Table, version: int | None, tick: int | None,
           tick_time: datetime | None = None) -> int:  # fmt: skip
    dl = _dl()
    dl.write_deltalake(spec.location, rows, mode="append", storage_options=_opts(spec),
                       commit_properties=_props(spec, version, tick, tick_time))  # fmt: skip
    appended: int = rows.num_rows
    return appended


def multiset(spec: LakeSpec, inserts: pa.Table, deletes: pa.Table, version: int | None,
             tick: int,
             tick_time: datetime | None = None) -> tuple[int, int]:  # fmt: skip
    """A table without a key: each delete image removes one equal row, then the inserts;
    the table is rewritten in one commit (documented: keyless tables are for small
    tables).  Returns (rows inserted, deleted)."""
    import pyarrow as pa

    if not deletes.num_rows:
        return append(spec, inserts, version, tick, tick_time), 0
    here = _arrow(_table(spec), spec.location, storage_opts=spec.storage)
    kept, removed = rows_kept_after_deletes(here, deletes.cast(here.schema))
    result = pa.concat_tables([here.take(kept), inserts.cast(here.schema)])
    _dl().write_deltalake(spec.location, result, mode="overwrite",
                          storage_options=_opts(spec),
                          commit_properties=_props(spec, version, tick, tick_time))  # fmt: skip
    return inserts.num_rows, removed


def truncate(spec: LakeSpec, version: int, tick: int) -> int:
    """Delete every row, in one commit; the rows deleted."""
    metrics = _table(spec).delete(commit_properties=_props(spec, version, tick))
    return int(metrics.get("num_deleted_rows", 0) or 0)


def data_dir(spec: LakeSpec) -> str:
    """Where the initial load's tasks write their Parquet files (inside the table)."""
    return spec.location


def commit_files(
    spec: LakeSpec, files: Sequence[tuple[str, int, int]], schema: pa.Schema, tick: int
) -> None:
    """The initial load: replace the table's rows by ``files`` (paths relative to the
    table, their sizes and rows) in ONE commit; the replay version is reset below every
    tick."""
    from deltalake.transaction import AddAction

    dt = _table(spec)
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        AddAction(path, size, {}, now, True, json.dumps({"numRecords": rows}))
        for path, size, rows in files
    ]
    dt.create_write_transaction(
        actions, mode="overwrite", schema=schema,
        commit_properties=_props(spec, 0, tick),
    )  # fmt: skip


def new_file_name(range_no: int) -> str:
    return f"part-load-{range_no:05d}-{uuid.uuid4().hex}.parquet"


def read(spec: LakeSpec, tick: int | None = None) -> pa.Table:
    """The table's rows as Arrow: at its newest version, or at the newest one whose commit
    is of a tick at most ``tick`` (the compare's sync tick)."""
    dt = _table(spec)
    if tick is not None:
        version = _version_at(dt, tick)
        if version is not None and version != dt.version():
            dt.load_as_version(version)
    return _arrow(dt, spec.location, storage_opts=spec.storage)


def rows_at(
    location: str, columns: list[str] | None = None, storage_options: dict[str, str] | None = None
) -> pa.Table:
    """The newest rows of the Delta table at ``location`` as Arrow (readers, tests)."""
    table: DeltaTable = _dl().DeltaTable(location, storage_options=storage_options)
    given = tuple(sorted((storage_options or {}).items()))
    return _arrow(table, location, columns, given)


def _arrow(
    dt: DeltaTable,
    location: str,
    columns: list[str] | None = None,
    storage_opts: Iterable[tuple[str, str]] = (),
) -> pa.Table:
    """The rows of ``dt`` (at its loaded version) as one Arrow table.

    A local table's files are read through pyarrow's own file system: delta-rs's, called
    from pyarrow's reader threads, makes the interpreter abort at its exit afterwards
    (SIGABRT, "terminate called without an active exception") in about two short
    processes of three, after a read that succeeded.
    """
    from pyarrow import fs

    path = local_path(location)
    if path is None:  # a store: through pyarrow's S3 file system, for the same reason
        from pgferry.lake import storage

        if urlparse(location).scheme.lower() not in ("s3", "s3a"):
            return dt.to_pyarrow_table(columns=columns)
        store, inner = storage.filesystem(location, tuple(storage_opts))
        return dt.to_pyarrow_table(columns=columns, filesystem=fs.SubTreeFileSystem(inner, store))

    local = fs.SubTreeFileSystem(path, fs.LocalFileSystem())
    return dt.to_pyarrow_table(columns=columns, filesystem=local)


def local_path(location: str) -> str | None:
    """The absolute path of a table's location on this machine (a path or a ``file://``
    URI, as ``DeltaTable.table_uri`` names it); None for a remote store."""
    url = urlparse(location)
    if url.scheme == "file":
        return os.path.abspath(unquote(url.path))
    return None if "://" in location else os.path.abspath(location)


def data_files(spec: LakeSpec, tick: int) -> list[str]:
    """The Parquet files of the newest version whose commit is of a tick at most ``tick``
    (local paths, or the store's URLs)."""
    dt = _table(spec)
    version = _version_at(dt, tick)
    if version is not None and version != dt.version():
        dt.load_as_version(version)
    return [_path_of(uri) for uri in dt.file_uris()]


def _path_of(uri: str) -> str:
    """A local file's path as the file system names it: delta-rs percent-encodes it
    (``Sales%20%C3%9C``), which Spark would take literally; a store's URL as it is."""
    if "://" in uri and not uri.startswith("file://"):
        return uri
    return unquote(uri.removeprefix("file://"))


def _version_at(dt: DeltaTable, tick: int) -> int | None:
    for entry in dt.history():  # newest first
        at = entry.get("pgferry.tick")
        if at is None or int(at) <= tick:
            return int(entry["version"])
    return None


def files(spec: LakeSpec) -> list[str]:
    """The table's current Parquet files (absolute paths), for Spark to read."""
    return list(_table(spec).file_uris())


def maintain(spec: LakeSpec, compact_every: int, keep_hours: int) -> bool:
    """Every ``compact_every`` commits: compact small files and vacuum files unused for
    ``keep_hours``; whether it ran.  The replay's application transaction stays in the log."""
    dt = _table(spec)
    if compact_every <= 0 or dt.version() % compact_every:
        return False
    compact(spec, keep_hours)
    return True


def compact(spec: LakeSpec, keep_hours: int | None = None) -> dict[str, Any]:
    dt = _table(spec)
    done = dt.optimize.compact()
    if keep_hours is not None:
        dt = _table(spec)
        dt.vacuum(retention_hours=keep_hours, enforce_retention_duration=False, dry_run=False)
        dt.cleanup_metadata()
    return done


def tick_time_of(spec: LakeSpec, tick: int) -> datetime | None:
    """The provider's time of ``tick`` recorded by the newest commit of that tick that
    records one (None: none does, e.g. commits of an older pgferry)."""
    for entry in _table(spec).history():
        at = entry.get("pgferry.tick")
        if at is None or int(at) > tick:
            continue  # a compaction, a schema change, or a later tick
        if int(at) < tick:
            return None
        found = entry.get(TICK_TIME)
        if found:  # else a repair's commit (no time) or one of an older pgferry
            return datetime.fromisoformat(found)
    return None


def newest_tick(spec: LakeSpec) -> int | None:
    """The tick recorded by the table's newest commit (None: a commit without one)."""
    history = _table(spec).history(1)
    at = history[0].get("pgferry.tick") if history else None
    return int(at) if at is not None else None


def repair(
    spec: LakeSpec, source: pa.Table, key: Sequence[str], version: int | None, tick: int
) -> None:
    """A repair's fix as ONE commit: ``source`` holds, op first, a ``D`` row for every key
    to clear and an ``I`` row for every row to write.  The MERGE matches only the ``D`` rows
    (so a key the lake holds twice is cleared whole), the ``I`` rows are inserted; the
    commit re-records the replay ``version`` it found, so exactly-once is untouched."""
    on = " and ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key)
    (
        _table(spec)
        .merge(source, f"{on} and s.{OP} = 'D'", source_alias="s", target_alias="t",
               commit_properties=_props(spec, version, tick))
        .when_matched_delete()
        .when_not_matched_insert_all(f"s.{OP} = 'I'", except_cols=[OP])
        .execute()
    )  # fmt: skip
