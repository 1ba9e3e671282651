"""What keeps a Delta lake leaf copy-on-write: delta-rs and deletion vectors.

A Delta batch of scattered updates rewrites every data file it touches (docs/lakehouse.md,
*Scattered updates*).  Deletion vectors would let it mark rows deleted instead.  The
delta-rs release pgferry writes Delta with writes none, even to a table that has the
``deletionVectors`` feature (its DELETE and MERGE copy every other row of a touched file
into a new one), and its pyarrow dataset (what compare, repair and the ``pgferry-lake``
source read through) refuses to read such a table.  These tests record that: the day one
of them fails, delta-rs has moved and the lake leaf can write merge-on-read Delta too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

pa = pytest.importorskip("pyarrow")
deltalake = pytest.importorskip("deltalake")

ROWS = 1000


@pytest.fixture
def dv_table(tmp_path):
    rows = pa.table(
        {"id": pa.array(range(ROWS), pa.int64()), "v": pa.array([str(i) for i in range(ROWS)])}
    )
    path = str(tmp_path / "t")
    deltalake.write_deltalake(path, rows, configuration={"delta.enableDeletionVectors": "true"})
    assert "deletionVectors" in (deltalake.DeltaTable(path).protocol().reader_features or [])
    return path


def _log_text(path: str) -> str:
    return "".join(p.read_text() for p in sorted(Path(path, "_delta_log").glob("*.json")))


@pytest.mark.parametrize("write", ["delete", "merge"])
def test_delta_rs_rewrites_the_file_instead_of_a_vector(dv_table, write):
    table = deltalake.DeltaTable(dv_table)
    if write == "delete":
        metrics = table.delete("id = 1")
    else:
        one = pa.table({"id": pa.array([1], pa.int64()), "v": pa.array(["x"])})
        metrics = (
            table.merge(one, "s.id = t.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .execute()
        )
    copied = metrics.get("num_copied_rows", metrics.get("num_target_rows_copied"))
    assert copied == ROWS - 1, metrics  # the whole file written again for one row
    assert '"deletionVector":{' not in _log_text(dv_table)


def test_delta_rs_pyarrow_dataset_refuses_to_read_it(dv_table):
    with pytest.raises(deltalake.exceptions.DeltaProtocolError, match="deletionVectors"):
        deltalake.DeltaTable(dv_table).to_pyarrow_dataset()
