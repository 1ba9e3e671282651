"""Merge-on-read Iceberg commits without a server: position delete files written by
pgferry and read by pyiceberg's own scan, the key index that finds the positions, and
the compaction that folds delete files into the data."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyiceberg")

from pgferry.lake import iceberg, key_index  # noqa: E402
from pgferry.lake.spec import COPY_ON_WRITE, MERGE_ON_READ, OP, LakeSpec  # noqa: E402

pytestmark = pytest.mark.pure

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _spec(tmp_path, mode: str = MERGE_ON_READ, table: str = "t") -> LakeSpec:
    return LakeSpec("iceberg", str(tmp_path), "public", table, "q:n:public.t", deletes=mode)


def _batch(ops: list[tuple[str, int, str | None]]) -> pa.Table:
    return pa.table({OP: [o for o, _, _ in ops], "id": [i for _, i, _ in ops],
                     "v": [v for _, _, v in ops]})  # fmt: skip


def _rows(spec: LakeSpec) -> list[tuple]:
    table = iceberg.catalog(spec.root).load_table(("public", spec.table))
    return sorted((r["id"], r["v"]) for r in table.scan().to_arrow().to_pylist())


def _files(spec: LakeSpec) -> tuple[int, int]:
    """(data files, delete files) of the current snapshot."""
    table = iceberg.catalog(spec.root).load_table(("public", spec.table))
    tasks = list(table.scan().plan_files())
    return len(tasks), len({d.file_path for t in tasks for d in t.delete_files})


def _load(spec: LakeSpec, n: int) -> dict[int, str]:
    iceberg.prepare(spec, SCHEMA, ["id"])
    rows = {i: f"r{i}" for i in range(1, n + 1)}
    iceberg.append(spec, pa.table({"id": list(rows), "v": list(rows.values())}), 0, 1)
    return rows


def _apply(rows: dict[int, str], ops) -> None:
    for op, key, value in ops:
        if op == "D":
            rows.pop(key, None)
        else:
            rows[key] = value


def test_merge_on_read_batches(tmp_path, monkeypatch) -> None:
    """Updates, deletes, re-inserts, key updates and several batches on one row: the
    table read by pyiceberg's scan is the expected one, each batch is one snapshot with
    one delete file, no data file of the load is rewritten, and the key index is read
    from the table once, then kept up to date by the commits themselves."""
    rebuilt = []
    real = key_index.KeyIndex.rebuild

    def rebuild(self, *args, **kwargs):
        rebuilt.append(args[0])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(key_index.KeyIndex, "rebuild", rebuild)
    spec = _spec(tmp_path)
    want = _load(spec, 1000)
    loaded = _files(spec)[0]
    batches = [
        [("U", 5, "a"), ("U", 500, "b"), ("D", 7, None), ("I", 1001, "new")],
        [("U", 5, "a2"), ("D", 1001, None), ("I", 7, "back")],  # same rows again, re-insert
        [("D", 999, None), ("I", 2000, "r999-moved"), ("U", 5, "a3")],  # a key update
        [("U", 7, "again"), ("U", 5, "a4"), ("U", 2000, "x")],
    ]
    table = iceberg.catalog(spec.root).load_table(("public", "t"))
    before = len(table.snapshots())
    for n, ops in enumerate(batches, start=1):
        iceberg.merge(spec, _batch(ops), ["id"], 1000 * (n + 1), n + 1)
        _apply(want, ops)
        assert _rows(spec) == sorted(want.items())
    table = iceberg.catalog(spec.root).load_table(("public", "t"))
    assert len(table.snapshots()) == before + len(batches)
    summary = table.current_snapshot().summary
    assert summary.additional_properties[iceberg.VERSION] == "5000"
    assert int(summary["total-position-deletes"]) > 0
    data, deletes = _files(spec)
    assert data == loaded + len(batches)  # each batch added one data file, rewrote none
    assert deletes == len(batches)
    assert iceberg.applied_version(spec) == 5000
    assert len(rebuilt) == 1


def test_positions_are_found_after_restart(tmp_path) -> None:
    """A new process (an empty index) finds the live positions from the delete files."""
    spec = _spec(tmp_path)
    want = _load(spec, 100)
    ops = [("U", 3, "x"), ("D", 4, None)]
    iceberg.merge(spec, _batch(ops), ["id"], 2000, 2)
    _apply(want, ops)
    key_index._INDEXES.clear()
    ops = [("U", 3, "y"), ("I", 4, "z"), ("U", 10, "w")]
    iceberg.merge(spec, _batch(ops), ["id"], 3000, 3)
    _apply(want, ops)
    assert _rows(spec) == sorted(want.items())
    # the old version of key 3 is deleted once (by the first batch), not again
    table = iceberg.catalog(spec.root).load_table(("public", "t"))
    assert table.current_snapshot().summary["total-position-deletes"] == "4"


def test_compaction_folds_deletes(tmp_path) -> None:
    spec = _spec(tmp_path)
    want = _load(spec, 200)
    for n in range(2, 6):
        ops = [("U", n, f"v{n}"), ("D", 100 + n, None), ("I", 1000 + n, "i")]
        iceberg.merge(spec, _batch(ops), ["id"], 1000 * n, n)
        _apply(want, ops)
    assert _files(spec)[1] > 0
    iceberg.compact(spec)
    assert _files(spec) == (1, 0)
    table = iceberg.catalog(spec.root).load_table(("public", "t"))
    summary = table.current_snapshot().summary
    assert summary.additional_properties[iceberg.VERSION] == "5000"
    assert summary["total-position-deletes"] == "0"
    assert summary["total-delete-files"] == "0"
    assert _rows(spec) == sorted(want.items())
    # after the rewrite the index is rebuilt from the new file
    ops = [("U", 1, "after")]
    iceberg.merge(spec, _batch(ops), ["id"], 6000, 6)
    _apply(want, ops)
    assert _rows(spec) == sorted(want.items())


def test_copy_on_write_reads_merge_on_read_files(tmp_path) -> None:
    """The setting may change: a copy-on-write batch on a table with delete files keeps
    its deleted rows deleted, and merge-on-read goes on after it."""
    spec = _spec(tmp_path)
    want = _load(spec, 50)
    for mode, n, ops in ((MERGE_ON_READ, 2, [("U", 1, "m"), ("D", 2, None)]),
                         (COPY_ON_WRITE, 3, [("U", 3, "c"), ("U", 1, "c1")]),
                         (MERGE_ON_READ, 4, [("U", 1, "m2"), ("I", 2, "back")])):  # fmt: skip
        iceberg.merge(_spec(tmp_path, mode), _batch(ops), ["id"], 1000 * n, n)
        _apply(want, ops)
        assert _rows(spec) == sorted(want.items())


def test_composite_and_text_keys() -> None:
    rows = pa.table({"a": ["x", "y", "x"], "b": [2, 1, 1]})
    values = key_index.key_values(rows, ["a", "b"])
    assert values.dtype == object and values[0] == ("x", 2)
    keys = key_index.FileKeys.of(values)
    wanted = key_index.key_values(pa.table({"a": ["x", "z"], "b": [1, 0]}), ["a", "b"])
    assert keys.find(np.sort(wanted)).tolist() == [2]
    text = key_index.FileKeys.of(key_index.key_values(pa.table({"s": ["b", "a", "b"]}), ["s"]))
    assert text.find(np.array(["b"], dtype=object)).tolist() == [0, 2]
    text.live[0] = False
    assert text.find(np.array(["b"], dtype=object)).tolist() == [2]


def test_table_format_has_delete_manifests(tmp_path) -> None:
    """The table is format version 2 (position deletes need it) and its delete file
    carries the spec's field ids."""
    import pyarrow.parquet as pq

    spec = _spec(tmp_path)
    _load(spec, 10)
    iceberg.merge(spec, _batch([("D", 1, None)]), ["id"], 2000, 2)
    table = iceberg.catalog(spec.root).load_table(("public", "t"))
    assert table.metadata.format_version == 2
    assert json.loads(table.properties[iceberg.KEY]) == ["id"]
    (task,) = [t for t in table.scan().plan_files() if t.delete_files]
    (delete,) = task.delete_files
    schema = pq.read_schema(delete.file_path.removeprefix("file://"))
    ids = {f.name: f.metadata[b"PARQUET:field_id"] for f in schema}
    assert ids == {"file_path": b"2147483546", "pos": b"2147483545"}


def test_pgferry_lake_source_applies_position_deletes(tmp_path) -> None:
    """The ``pgferry-lake`` Spark source's executor side, without Spark: each data file
    read less the rows its delete files remove, the same rows as pyiceberg's scan."""
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import from_arrow_schema

    from pgferry.stream import lake_source

    spec = _spec(tmp_path)
    want = _load(spec, 300)
    for n in range(2, 5):
        ops = [("U", n, "u"), ("D", 100 + n, None), ("I", 500 + n, "i"), ("U", 2, f"x{n}")]
        iceberg.merge(spec, _batch(ops), ["id"], 1000 * n, n)
        _apply(want, ops)
    source = lake_source.LakeSource({"path": str(tmp_path / "public" / "t")})
    reader = source.reader(from_arrow_schema(SCHEMA))
    parts = reader.partitions()
    assert any(p.value.deletes for p in parts)
    got = [row for p in parts for batch in reader.read(p) for row in batch.to_pylist()]
    assert sorted((r["id"], r["v"]) for r in got) == sorted(want.items())


def test_a_commit_planned_on_a_replaced_snapshot_is_refused(tmp_path) -> None:
    """A row delta or a rewrite planned on a snapshot another writer has since replaced
    is refused in one line, nothing committed (pyiceberg would retry it on top of the new
    snapshot, with positions or rows read from the old one)."""
    from pgferry.lake import iceberg_commit
    from pgferry.lake.spec import LakeError

    spec = _spec(tmp_path)
    want = _load(spec, 20)
    stale = iceberg.catalog(spec.root).load_table(("public", "t"))
    also = iceberg.catalog(spec.root).load_table(("public", "t"))  # a failed try refreshes
    old_rows = also.scan().to_arrow()
    ops = [("U", 1, "meanwhile")]
    iceberg.merge(spec, _batch(ops), ["id"], 2000, 2)
    _apply(want, ops)
    path = next(iter(stale.scan().plan_files())).file.file_path
    rows = pa.table({"id": [1], "v": ["stale"]}).cast(stale.schema().as_arrow())
    with pytest.raises(LakeError, match="another writer committed"):
        iceberg_commit.row_delta(stale, rows, {path: [0]}, {})
    with pytest.raises(LakeError, match="another writer committed"):
        iceberg_commit.rewrite(also, old_rows, {})
    assert _rows(spec) == sorted(want.items())
    table = iceberg.catalog(spec.root).load_table(("public", "t"))
    named = {t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()}
    named |= {d.file_path.removeprefix("file://") for t in table.scan().plan_files()
              for d in t.delete_files}  # fmt: skip
    on_disk = {str(p) for p in (tmp_path / "public" / "t" / "data").glob("*.parquet")}
    assert on_disk == named  # the refused commits' files are gone


def test_a_batch_written_as_several_files(tmp_path) -> None:
    """pyiceberg splits a large batch into several data files (here: files of 1 kB); the
    index reads their keys back and the next batches find the rows in them."""
    spec = _spec(tmp_path)
    want = _load(spec, 10)
    table = iceberg.catalog(spec.root).load_table(("public", "t"))
    with table.transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": "1024"})
    ops = [("I", n, f"many{n}") for n in range(100, 2100)]
    iceberg.merge(spec, _batch(ops), ["id"], 2000, 2)
    _apply(want, ops)
    assert _files(spec)[0] > 2
    ops = [("U", n, "changed") for n in range(100, 2100, 7)] + [("D", 2000, None)]
    iceberg.merge(spec, _batch(ops), ["id"], 3000, 3)
    _apply(want, ops)
    assert _rows(spec) == sorted(want.items())
