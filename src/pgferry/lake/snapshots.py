"""The Parquet files that hold a lake table's rows as of one tick, and their rows read by
pyarrow, for Spark to read.

Delta through delta-rs writes no deletion vectors: the files of a version, read as
Parquet, are exactly its rows.  An Iceberg table written merge-on-read
(``lake_iceberg_deletes``) also has position delete files: a version's rows are its data
files' rows less the positions its delete files name (:func:`delete_files`), which a
reader must take away (``sync/lake_spark.py`` does, by file name and row index).
:func:`read_file` reads one data file, from a folder or an object store (pyarrow's file
system of :mod:`.storage`, whose options a Spark task carries), as Arrow batches of the
columns asked for, less the rows its delete files remove: the Python tasks of
``compare``, ``repair`` and the ``pgferry-lake`` data source read a table on a store this
way, where Spark's own Parquet reader would need the ``hadoop-aws`` jars.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from pgferry.lake import iceberg, storage
from pgferry.lake.spec import LakeError, LakeSpec

if TYPE_CHECKING:  # Arrow and pyiceberg: imported where a table is read
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.table import FileScanTask

_FIELD_ID = b"PARQUET:field_id"


def _iceberg_tasks(spec: LakeSpec, tick: int) -> list[FileScanTask]:
    table = iceberg._table(spec)
    for snap in iceberg._ancestry(table):
        at = snap.summary.additional_properties.get(iceberg.TICK) if snap.summary else None
        if at is None or int(at) <= tick:
            return list(table.scan(snapshot_id=snap.snapshot_id).plan_files())
    return []


def data_files(spec: LakeSpec, tick: int) -> list[str]:
    """Paths of the files of the newest version whose commit is of a tick at most ``tick``
    (local paths, or the store's URLs)."""
    if spec.format == "delta":
        from pgferry.lake import delta

        return delta.data_files(spec, tick)
    if spec.format == "iceberg":
        return [t.file.file_path.removeprefix("file://") for t in _iceberg_tasks(spec, tick)]
    raise LakeError(f"unknown lake format {spec.format!r}")


def table_schema(spec: LakeSpec) -> pa.Schema:
    """The lake table's current Arrow schema (Iceberg's with its field ids)."""
    if spec.format == "delta":
        import pyarrow as pa

        from pgferry.lake import delta

        return pa.schema(delta._table(spec).schema().to_arrow())
    return iceberg._table(spec).schema().as_arrow()


def open_file(path: str, opts: storage.Options) -> pq.ParquetFile:
    """A data file (a local path or a store's URL) as a ``pyarrow.parquet.ParquetFile``."""
    import pyarrow.parquet as pq

    if storage.is_remote(path):
        url = urlparse(path)
        # The store's key as written: delta-rs names a file by a percent-encoded URI.
        path = f"{url.scheme}://{url.netloc}{unquote(url.path)}"
    store, inner = storage.filesystem(path, opts)
    try:
        return pq.ParquetFile(store.open_input_file(inner))
    except OSError as exc:
        raise LakeError(
            f"lake file {storage.mask(path, opts)} cannot be read: {storage.reason(exc, opts)}"
        ) from None


def file_columns(file_schema: pa.Schema, table_schema: pa.Schema) -> dict[str, str]:
    """Each table column the file holds -> its name in the file.  By Iceberg field id when
    both the file and the table have them: pyiceberg writes them, under names it sanitises
    (``Mixed Col`` is ``Mixed_x20Col``).  Else by name: Delta's files, and the initial
    load's files of an Iceberg table, which carry no field ids and the columns' own names."""
    ids = {_field_id(f): f.name for f in file_schema if _field_id(f) is not None}
    if not ids or not any(_field_id(f) is not None for f in table_schema):
        return {name: name for name in table_schema.names if name in file_schema.names}
    return {f.name: ids[_field_id(f)] for f in table_schema if _field_id(f) in ids}


def read_file(
    path: str,
    opts: storage.Options,
    table_schema: pa.Schema,
    columns: Sequence[str],
    schema: pa.Schema,
    name: str = "",
    deletes: Sequence[str] = (),
) -> Iterator[pa.RecordBatch]:
    """One data file's rows as record batches of ``schema`` (``columns``, in that order,
    cast to its types), less the rows its position ``deletes`` files remove (Iceberg
    merge-on-read; they name the data file ``name``, its path as the metadata has it); a
    column of ``table_schema`` the file lacks (added after it was written) reads as NULL.
    Empty batches are skipped."""
    import pyarrow as pa
    import pyarrow.compute as pc

    file = open_file(path, opts)
    gone = _deleted(name or path, deletes, opts) if deletes else None
    found = file_columns(file.schema_arrow, table_schema)
    wanted = [found[name] for name in columns if name in found]
    if wanted:
        batches = file.iter_batches(columns=wanted)
    else:  # none of the columns asked for is in the file: only its row count
        batches = iter([pa.record_batch([pa.nulls(file.metadata.num_rows)], names=["_"])])
    start = 0
    for batch in batches:
        first, start = start, start + batch.num_rows
        if gone is not None and len(gone):
            at = pa.array(range(first, start), pa.int64())
            batch = batch.filter(pc.invert(pc.is_in(at, value_set=gone)))
        if not batch.num_rows:
            continue
        arrays = [
            batch.column(found[name]) if name in found
            else pa.nulls(batch.num_rows, schema.field(name).type)
            for name in columns
        ]  # fmt: skip
        yield pa.Table.from_arrays(arrays, names=list(columns)).cast(schema).to_batches()[0]


def _deleted(name: str, deletes: Sequence[str], opts: storage.Options) -> pa.Array | None:
    """The positions of data file ``name``'s rows its position delete files remove (an
    Arrow array; None when they name none of them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = []
    for path in deletes:
        rows = open_file(path.removeprefix("file://"), opts).read(columns=["file_path", "pos"])
        found.append(rows.filter(pc.equal(rows["file_path"], name))["pos"])
    chunks = [c for arr in found for c in arr.chunks]
    return pa.chunked_array(chunks, pa.int64()).combine_chunks() if chunks else None


def _field_id(field: pa.Field) -> bytes | None:
    return (field.metadata or {}).get(_FIELD_ID)


def delete_files(spec: LakeSpec, tick: int) -> list[str]:
    """Paths of the position delete files of that version (Parquet: ``file_path``, the
    data file's path as the table's metadata writes it, and ``pos``, its row index)."""
    if spec.format != "iceberg":
        return []
    found = {d.file_path for t in _iceberg_tasks(spec, tick) for d in t.delete_files}
    return sorted(path.removeprefix("file://") for path in found)
