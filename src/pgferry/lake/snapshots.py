"""The Parquet files that hold a lake table's rows as of one tick, for Spark to read.

Delta through delta-rs writes no deletion vectors: the files of a version, read as
Parquet, are exactly its rows.  An Iceberg table written merge-on-read
(``lake_iceberg_deletes``) also has position delete files: a version's rows are its data
files' rows less the positions its delete files name (:func:`delete_files`), which a
reader must take away (``pipeline/lake_spark.py`` does, by file name and row index).
"""

from __future__ import annotations

from pgferry.lake import iceberg
from pgferry.lake.spec import LakeError, LakeSpec


def _iceberg_tasks(spec: LakeSpec, tick: int) -> list:
    table = iceberg._table(spec)
    for snap in iceberg._ancestry(table):
        at = snap.summary.additional_properties.get(iceberg.TICK) if snap.summary else None
        if at is None or int(at) <= tick:
            return list(table.scan(snapshot_id=snap.snapshot_id).plan_files())
    return []


def data_files(spec: LakeSpec, tick: int) -> list[str]:
    """Paths of the files of the newest version whose commit is of a tick at most ``tick``."""
    if spec.format == "delta":
        from pgferry.lake import delta

        return delta.data_files(spec, tick)
    if spec.format == "iceberg":
        return [t.file.file_path.removeprefix("file://") for t in _iceberg_tasks(spec, tick)]
    raise LakeError(f"unknown lake format {spec.format!r}")


def delete_files(spec: LakeSpec, tick: int) -> list[str]:
    """Paths of the position delete files of that version (Parquet: ``file_path``, the
    data file's path as the table's metadata writes it, and ``pos``, its row index)."""
    if spec.format != "iceberg":
        return []
    found = {d.file_path for t in _iceberg_tasks(spec, tick) for d in t.delete_files}
    return sorted(path.removeprefix("file://") for path in found)
