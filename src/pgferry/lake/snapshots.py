"""The Parquet files that hold a lake table's rows as of one tick, and their rows read by
pyarrow, for Spark to read.

Both formats as pgferry writes them keep every row of a version in plain Parquet files:
Delta through delta-rs writes no deletion vectors, Iceberg through pyiceberg writes
copy-on-write (no delete files).  So the files of the version of a tick, read as Parquet,
are exactly its rows.  :func:`read_file` reads one of them, from a folder or an object
store (pyarrow's file system of :mod:`.storage`, whose options a Spark task carries), as
Arrow batches of the columns asked for: the Python tasks of ``compare``, ``repair`` and
the ``pgferry-lake`` data source read a table on a store this way, where Spark's own
Parquet reader would need the ``hadoop-aws`` jars.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlparse

from pgferry.lake import iceberg, storage
from pgferry.lake.spec import LakeError, LakeSpec

_FIELD_ID = b"PARQUET:field_id"


def data_files(spec: LakeSpec, tick: int) -> list[str]:
    """Paths of the files of the newest version whose commit is of a tick at most ``tick``
    (local paths, or the store's URLs)."""
    if spec.format == "delta":
        from pgferry.lake import delta

        return delta.data_files(spec, tick)
    if spec.format == "iceberg":
        table = iceberg._table(spec)
        for snap in iceberg._ancestry(table):
            at = snap.summary.additional_properties.get(iceberg.TICK) if snap.summary else None
            if at is None or int(at) <= tick:
                scan = table.scan(snapshot_id=snap.snapshot_id)
                return [t.file.file_path.removeprefix("file://") for t in scan.plan_files()]
        return []
    raise LakeError(f"unknown lake format {spec.format!r}")


def table_schema(spec: LakeSpec):
    """The lake table's current Arrow schema (Iceberg's with its field ids)."""
    if spec.format == "delta":
        import pyarrow as pa

        from pgferry.lake import delta

        return pa.schema(delta._table(spec).schema().to_arrow())
    return iceberg._table(spec).schema().as_arrow()


def open_file(path: str, opts: storage.Options):
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


def file_columns(file_schema, table_schema) -> dict[str, str]:
    """Each table column the file holds -> its name in the file.  By Iceberg field id when
    both the file and the table have them: pyiceberg writes them, under names it sanitises
    (``Mixed Col`` is ``Mixed_x20Col``).  Else by name: Delta's files, and the initial
    load's files of an Iceberg table, which carry no field ids and the columns' own names."""
    ids = {_field_id(f): f.name for f in file_schema if _field_id(f) is not None}
    if not ids or not any(_field_id(f) is not None for f in table_schema):
        return {name: name for name in table_schema.names if name in file_schema.names}
    return {f.name: ids[_field_id(f)] for f in table_schema if _field_id(f) in ids}


def read_file(
    path: str, opts: storage.Options, table_schema, columns: Sequence[str], schema
) -> Iterator[Any]:
    """One data file's rows as record batches of ``schema`` (``columns``, in that order,
    cast to its types); a column of ``table_schema`` the file lacks (added after it was
    written) reads as NULL.  Empty batches are skipped."""
    import pyarrow as pa

    file = open_file(path, opts)
    found = file_columns(file.schema_arrow, table_schema)
    wanted = [found[name] for name in columns if name in found]
    if wanted:
        batches = file.iter_batches(columns=wanted)
    else:  # none of the columns asked for is in the file: only its row count
        batches = iter([pa.record_batch([pa.nulls(file.metadata.num_rows)], names=["_"])])
    for batch in batches:
        if not batch.num_rows:
            continue
        arrays = [
            batch.column(found[name]) if name in found
            else pa.nulls(batch.num_rows, schema.field(name).type)
            for name in columns
        ]  # fmt: skip
        yield pa.Table.from_arrays(arrays, names=list(columns)).cast(schema).to_batches()[0]


def _field_id(field) -> bytes | None:
    return (field.metadata or {}).get(_FIELD_ID)
