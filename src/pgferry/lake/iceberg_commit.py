"""Iceberg snapshots pyiceberg has no public call for: a row delta and a rewrite.

pyiceberg 0.12 writes data files and reads position deletes in its scans, but its
``delete()`` only rewrites files ("Merge on read is not yet supported") and it writes no
manifest of delete files.  pgferry's merge-on-read needs two kinds of snapshot:

- a **row delta** (:func:`row_delta`): the batch's new rows as a data file and the old
  versions of its changed and deleted rows as ONE position delete file (Parquet,
  ``file_path`` / ``pos`` under the field ids the Iceberg spec reserves), both in one
  snapshot on top of every file already there;
- a **rewrite** (:func:`rewrite`): every data and delete file of the current snapshot
  removed and the table's rows, deletes applied, written anew, in one snapshot
  (compaction folds the delete files into the data).

Both are snapshot producers of pyiceberg's own (``_SnapshotProducer``) staged in a
transaction, so the snapshot summary, the manifest list, the sequence numbers and the
catalog commit are pyiceberg's.  This module is the only place that touches pyiceberg's
private API: ``_SnapshotProducer`` and its ``new_manifest_output`` / ``_summary``,
``ManifestWriterV2`` (a subclass whose content is DELETES) and
``pyiceberg.io.pyarrow._dataframe_to_data_files`` (the data files an append writes).  Kept
here so that a pyiceberg upgrade that moves them breaks one module, which
``tests/lake/test_iceberg_commit.py`` exercises without a server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import Record

from pgferry.lake.spec import LakeError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.snapshots import Summary

# The Iceberg spec's reserved field ids of a position delete file's columns.
FILE_PATH_ID = 2147483546
POS_ID = 2147483545


class _DeletesManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (pyiceberg writes manifests of data files only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _Files(_SnapshotProducer["_Files"]):
    """One snapshot: data and delete files added; with ``replace``, every live file of
    the parent removed, else every parent manifest kept (a fast append's way)."""

    def __init__(self, transaction: Transaction, properties: Mapping[str, str],
                 operation: Operation, replace: bool) -> None:  # fmt: skip
        super().__init__(operation, transaction, transaction._table.io,
                         snapshot_properties=dict(properties))  # fmt: skip
        self.added_deletes: list[DataFile] = []
        self.replace = replace

    def _validate_concurrency(self) -> None:
        """Refuse a retry on top of another writer's snapshot (pyiceberg retries a commit
        the catalog refused): the positions of a row delta and the rows of a rewrite were
        read from the snapshot this began on, which another commit (a compaction, a
        repair, a batch) may have replaced.  The caller plans again instead (the worker
        retries its batch, exactly once)."""
        from pyiceberg.exceptions import ValidationException

        if self._commit_window is not None and not self._commit_window.is_empty():
            raise ValidationException("another writer committed to the table meanwhile")

    def _existing_manifests(self) -> list[ManifestFile]:
        return []

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _parent_manifests(self) -> list[ManifestFile]:
        if self._parent_snapshot_id is None:
            return []
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
        return list(parent.manifests(io=self._io)) if parent is not None else []

    def _write(self, content: ManifestContent, entries: Sequence[ManifestEntry],
               deleted: bool) -> ManifestFile:  # fmt: skip
        spec = self._transaction.table_metadata.spec()
        kind = _DeletesManifestWriter if content == ManifestContent.DELETES else ManifestWriterV2
        args = (spec, self.schema(), self.new_manifest_output(), self._snapshot_id,
                self._compression)  # fmt: skip
        with kind(*args) as writer:
            for entry in entries:
                if deleted:
                    writer.delete(entry)
                else:
                    writer.add(entry)
        return writer.to_manifest_file()

    def _manifests(self) -> list[ManifestFile]:
        def added(files: list[DataFile]) -> list[ManifestEntry]:
            return [
                ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                        snapshot_id=self._snapshot_id, data_file=f)
                for f in files
            ]  # fmt: skip

        out = []
        if self._added_data_files:
            out.append(self._write(ManifestContent.DATA, added(self._added_data_files), False))
        if self.added_deletes:
            out.append(self._write(ManifestContent.DELETES, added(self.added_deletes), False))
        parents = self._parent_manifests()
        if not self.replace:
            return out + [m for m in parents if m.has_added_files() or m.has_existing_files()]
        live = [e for m in parents for e in m.fetch_manifest_entry(self._io, discard_deleted=True)]
        self._deleted_data_files = {e.data_file for e in live}  # for the summary's totals
        kinds = ((DataFileContent.DATA, ManifestContent.DATA),
                 (DataFileContent.POSITION_DELETES, ManifestContent.DELETES))  # fmt: skip
        for content, kind in kinds:
            gone = [e for e in live if e.data_file.content == content]
            if gone:
                out.append(self._write(kind, gone, True))
        return out

    def _summary(self, snapshot_properties: Mapping[str, str] = {}) -> Summary:  # noqa: B006
        # The collector counts delete files by their content; pyiceberg hands it only the
        # data files it appended.
        saved = self._added_data_files
        self._added_data_files = saved + self.added_deletes
        try:
            return super()._summary(dict(snapshot_properties))
        finally:
            self._added_data_files = saved


def write_data_files(table: Table, rows: pa.Table, write_uuid: uuid.UUID) -> list[DataFile]:
    """``rows`` (Arrow, the table's schema) as the table's Parquet data files, in order:
    the first file holds the first rows."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    if not rows.num_rows:
        return []
    return list(_dataframe_to_data_files(table_metadata=table.metadata, df=rows,
                                         io=table.io, write_uuid=write_uuid))  # fmt: skip


def write_position_deletes(table: Table, positions: Mapping[str, Any]) -> DataFile | None:
    """One position delete file of ``positions`` (data file path -> row positions),
    sorted by path and position as the spec asks; None when there is nothing to delete."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths, pos = [], []
    for path in sorted(positions):
        found = sorted({int(p) for p in positions[path]})
        paths += [path] * len(found)
        pos += found
    if not pos:
        return None
    schema = pa.schema([
        pa.field("file_path", pa.string(), nullable=False,
                 metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False,
                 metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
    ])  # fmt: skip
    rows = pa.table([pa.array(paths, pa.string()), pa.array(pos, pa.int64())], schema=schema)
    location = table.location_provider().new_data_location(f"{uuid.uuid4()}-deletes.parquet")
    output = table.io.new_output(location)
    with output.create(overwrite=False) as stream:
        pq.write_table(rows, stream, compression="zstd")
    size = len(table.io.new_input(location))
    first, last = paths[0], paths[-1]
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(pos),
        file_size_in_bytes=size,
        # The path's bounds let a reader apply the file only to the data files it names.
        lower_bounds={FILE_PATH_ID: first.encode(), POS_ID: min(pos).to_bytes(8, "little")},
        upper_bounds={FILE_PATH_ID: last.encode(), POS_ID: max(pos).to_bytes(8, "little")},
        spec_id=table.metadata.default_spec_id,
    )


@contextmanager
def _one_line(table: Table, written: Sequence[str]) -> Iterator[None]:
    """A commit refused because another writer got there first, as one line; the files
    ``written`` for it, which no snapshot names, removed."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    try:
        yield
    except (CommitFailedException, ValidationException) as exc:
        for path in written:
            table.io.delete(path)
        name = ".".join(table.name())
        raise LakeError(f"Iceberg table {name}: {exc}; not committed, to be done again") from None


def row_delta(table: Table, rows: pa.Table, positions: Mapping[str, Any],
              properties: Mapping[str, str]
              ) -> tuple[str | None, list[DataFile], DataFile | None]:  # fmt: skip
    """ONE snapshot: ``rows`` appended as data files and the rows at ``positions`` deleted
    by one position delete file.  Returns the new snapshot's id (as text, None when the
    table has none), the data files written (in the order of ``rows``) and the delete
    file."""
    write_uuid = uuid.uuid4()
    data = write_data_files(table, rows, write_uuid)
    deletes = write_position_deletes(table, positions)
    operation = Operation.OVERWRITE if deletes is not None and data else (
        Operation.DELETE if deletes is not None else Operation.APPEND)  # fmt: skip
    written = [f.file_path for f in data] + ([deletes.file_path] if deletes else [])
    with _one_line(table, written), table.transaction() as tx:
        producer = _Files(tx, properties, operation, replace=False)
        producer.commit_uuid = write_uuid
        with producer:
            for f in data:
                producer.append_data_file(f)
            if deletes is not None:
                producer.added_deletes.append(deletes)
    snap = table.current_snapshot()
    return (str(snap.snapshot_id) if snap else None), data, deletes


def rewrite(table: Table, rows: pa.Table, properties: Mapping[str, str]) -> list[DataFile]:
    """ONE snapshot: every data and delete file of the table removed, ``rows`` written as
    its only data files."""
    write_uuid = uuid.uuid4()
    data = write_data_files(table, rows, write_uuid)
    operation = Operation.OVERWRITE if table.current_snapshot() is not None else Operation.APPEND
    with _one_line(table, [f.file_path for f in data]), table.transaction() as tx:
        producer = _Files(tx, properties, operation, replace=True)
        producer.commit_uuid = write_uuid
        with producer:
            for f in data:
                producer.append_data_file(f)
    return data
