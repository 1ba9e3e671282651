"""The Parquet files that hold a lake table's rows as of one tick, for Spark to read.

Both formats as pgferry writes them keep every row of a version in plain Parquet files:
Delta through delta-rs writes no deletion vectors, Iceberg through pyiceberg writes
copy-on-write (no delete files).  So the files of the version of a tick, read as Parquet,
are exactly its rows.
"""

from __future__ import annotations

from pgferry.lake import iceberg
from pgferry.lake.spec import LakeError, LakeSpec


def data_files(spec: LakeSpec, tick: int) -> list[str]:
    """Paths of the files of the newest version whose commit is of a tick at most ``tick``."""
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
