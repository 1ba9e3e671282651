"""Apache Iceberg tables through pyiceberg, with a SQL catalog in a SQLite file.

The catalog of a lake is ``DIR/pgferry_catalog.db`` (SQLite, SQLAlchemy's
``sqlite:///`` URL; catalog name ``pgferry``), its warehouse ``DIR``; a lake on object
storage (``s3://...``) keeps the catalog file on this machine (``lake_catalog``: SQLite
cannot live on a store) and its tables in the store; a table
``schema.table`` is the namespace ``schema``'s table, kept at ``DIR/schema/table``
(``metadata/`` and ``data/``).  Any Iceberg reader given that catalog finds it.

Every write here is ONE Iceberg commit (a pyiceberg transaction: a MERGE is a delete of the
batch's keys and an append of its new rows, in one metadata commit) whose snapshots carry
the replay version, the tick and the provider's time of it in their summary
(``pgferry.version``, ``pgferry.tick``, ``pgferry.tick_time``); :func:`applied_version`
reads the current snapshot's.  The table properties ``pgferry.owner`` and ``pgferry.key``
mark the tables pgferry made and the key each was made for.

A batch of a keyed table is written one of two ways (``lake_iceberg_deletes``):

- copy-on-write: pyiceberg's delete of the batch's keys rewrites every data file holding
  one of them, then the new rows are appended;
- merge-on-read: the batch's new rows become one data file and the rows they replace or
  delete one position delete file, in one snapshot (:mod:`.iceberg_commit`, which
  pyiceberg lacks); the positions come from :mod:`.key_index`, so a batch reads no data
  file.  Readers must apply position deletes (pyiceberg's scans do); compaction folds
  them into the data.

Neither writes equality deletes, which pyiceberg cannot read.
"""

from __future__ import annotations

import json
import os
import uuid
import warnings
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgferry.lake.spec import MERGE_ON_READ, OP, LakeError, LakeSpec, rows_kept_after_deletes

if TYPE_CHECKING:  # pyiceberg and Arrow: imported by a node that has Iceberg tables
    import numpy as np
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from pgferry.lake.key_index import KeyIndex

OWNER = "pgferry.owner"
KEY = "pgferry.key"  # the key the table was made for, JSON
VERSION = "pgferry.version"
TICK = "pgferry.tick"
TICK_TIME = "pgferry.tick_time"  # the provider's time of the tick (ISO 8601)
CATALOG_FILE = "pgferry_catalog.db"


def check_installed() -> None:
    try:
        import pyiceberg.catalog.sql  # noqa: F401
        import sqlalchemy  # noqa: F401
    except ImportError:
        raise LakeError(
            "lake format iceberg needs pyiceberg with SQLite: pip install 'pgferry[lake]'"
        ) from None


def catalog_file(spec: LakeSpec) -> str:
    """The SQLite file of the spec's catalog."""
    return spec.catalog or os.path.join(spec.root, CATALOG_FILE)


def catalog(spec: LakeSpec | str) -> SqlCatalog:
    """The lake's catalog (given a spec, or a local lake's folder)."""
    from pyiceberg.catalog.sql import SqlCatalog

    if isinstance(spec, str):
        spec = LakeSpec("iceberg", spec, "", "", "")

    props: dict[str, str] = {}
    if spec.remote:
        from pgferry.lake import storage

        props = storage.iceberg_properties(spec.storage)
    return SqlCatalog(
        "pgferry",
        uri=f"sqlite:///{catalog_file(spec)}",
        warehouse=spec.root if spec.remote else f"file://{spec.root}",
        **props,
    )


def _ident(spec: LakeSpec) -> tuple[str, str]:
    return (spec.schema, spec.table)


def _load(spec: LakeSpec) -> Table | None:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog(spec).load_table(_ident(spec))
    except NoSuchTableError:
        return None


def owner_of(spec: LakeSpec) -> str | None:
    table = _load(spec)
    if table is None:
        from pgferry.lake import storage

        if storage.is_dir(storage.join(spec.location, "metadata"), spec.storage):
            return ""  # an Iceberg table of another catalog at the same place
        return None
    owner: str = table.properties.get(OWNER, "")
    return owner


def key_of(spec: LakeSpec) -> list[str] | None:
    """The key the table was made for (None: not recorded, a table of an older pgferry)."""
    table = _load(spec)
    found = table.properties.get(KEY) if table is not None else None
    return list(json.loads(found)) if found is not None else None


def record_key(spec: LakeSpec, key: Sequence[str]) -> None:
    with _table(spec).transaction() as tx:
        tx.set_properties({KEY: json.dumps(list(key))})


def prepare(spec: LakeSpec, schema: pa.Schema, key: Sequence[str]) -> None:
    """Create the empty table with the owner marker and its key, unless it is there."""
    if _load(spec) is not None:
        return
    cat = catalog(spec)
    cat.create_namespace_if_not_exists(spec.schema)
    cat.create_table(_ident(spec), schema=schema, location=spec.location,
                     properties={OWNER: spec.owner, KEY: json.dumps(list(key))})  # fmt: skip


def _table(spec: LakeSpec) -> Table:
    table = _load(spec)
    if table is None:
        raise LakeError(f"no Iceberg table {spec.name} in the catalog of {spec.root}")
    return table


def _props(
    version: int | None, tick: int | None, tick_time: datetime | None = None
) -> dict[str, str]:
    props = {}
    if version is not None:
        props[VERSION] = str(version)
    if tick is not None:
        props[TICK] = str(tick)
        if tick_time is not None:
            props[TICK_TIME] = tick_time.isoformat()
    return props


def applied_version(spec: LakeSpec) -> int | None:
    """The newest replay version in the current snapshot's line (None: none yet)."""
    table = _table(spec)
    for snap in _ancestry(table):
        found = snap.summary.additional_properties.get(VERSION) if snap.summary else None
        if found is not None:
            return int(found)
    return None


def _ancestry(table: Table) -> Iterator[Snapshot]:
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    snap = table.current_snapshot()
    while snap is not None:
        yield snap
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id else None


def _key_filter(rows: pa.Table, key: Sequence[str]) -> BooleanExpression:
    from pyiceberg.expressions import And, EqualTo, In, Or

    # pyiceberg's predicates take their term and values positionally; its type hints give
    # only the fields of the pydantic model they are (keywords), hence the ignores.
    if len(key) == 1:
        return In(key[0], set(rows[key[0]].to_pylist()))  # type: ignore[call-arg, arg-type]
    terms: list[BooleanExpression] = [
        And(*[EqualTo(k, r[k]) for k in key])  # type: ignore[call-arg, arg-type]
        if len(key) > 1
        else EqualTo(key[0], r[key[0]])  # type: ignore[call-arg, arg-type]
        for r in rows.select(list(key)).to_pylist()
    ]
    return terms[0] if len(terms) == 1 else Or(*terms)


def arrow_schema(spec: LakeSpec) -> pa.Schema:
    """The table's columns as an Arrow schema."""
    return _table(spec).schema().as_arrow()


def add_columns(spec: LakeSpec, fields: Sequence[pa.Field]) -> None:
    """Add ``fields`` (Arrow fields, nullable) to the table, in one commit."""
    import pyarrow as pa

    with _table(spec).update_schema() as update:
        update.union_by_name(pa.schema(fields))


def merge(spec: LakeSpec, source: pa.Table, key: Sequence[str], version: int, tick: int,
          tick_time: datetime | None = None) -> tuple[int, int]:  # fmt: skip
    """The batch's keys deleted and its new rows appended, in one commit."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if spec.deletes == MERGE_ON_READ:
        return _merge_on_read(spec, source, key, _props(version, tick, tick_time))
    table = _table(spec)
    props = _props(version, tick, tick_time)
    upserts = source.filter(pc.invert(pc.is_in(source[OP], value_set=pa.array(["D", "d"]))))
    rows = upserts.drop([OP]).cast(table.schema().as_arrow())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "delete did not match any records"
        with table.transaction() as tx:
            if source.num_rows:
                tx.delete(_key_filter(source, key), snapshot_properties=props)
            tx.append(rows, snapshot_properties=props)
    deletes = source.num_rows - upserts.num_rows
    return upserts.num_rows, deletes


def _merge_on_read(spec: LakeSpec, source: pa.Table, key: Sequence[str],
                   props: dict[str, str]) -> tuple[int, int]:  # fmt: skip
    """Merge-on-read: the live rows holding a key of the batch deleted by position and
    the batch's new rows appended, in ONE snapshot."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pgferry.lake import iceberg_commit, key_index

    table = _table(spec)
    schema = table.schema().as_arrow()
    gone = pc.is_in(source[OP], value_set=pa.array(["D", "d"]))
    rows = source.filter(pc.invert(gone)).drop([OP]).cast(schema)
    keys = source.select(list(key)).cast(pa.schema([schema.field(k) for k in key]))
    index = key_index.of_table(spec.location, key)
    with index.lock:
        _sync_index(table, index)
        positions = index.find(key_index.key_values(keys, key))
        snapshot, written, _ = iceberg_commit.row_delta(table, rows, positions, props)
        index.deleted(positions)
        if len(written) == 1:  # the batch's rows in their order: their keys are known
            index.added([(written[0].file_path, rows.num_rows)], key_index.key_values(rows, key))
        for f in written if len(written) > 1 else ():  # split by pyiceberg's bin packing
            index.added([(f.file_path, f.record_count)],
                        key_index.key_values(_read_columns(table, f, key), key))  # fmt: skip
        index.snapshot = snapshot
    return rows.num_rows, source.num_rows - rows.num_rows


def _sync_index(table: Table, index: KeyIndex) -> None:
    """Bring ``index`` to the table's current snapshot when it reflects another."""
    snap = table.current_snapshot()
    current = str(snap.snapshot_id) if snap is not None else None
    if index.snapshot == current and index.snapshot is not None:
        return
    from pgferry.lake import key_index

    tasks = list(table.scan().plan_files()) if snap is not None else []
    data = {t.file.file_path: t.file for t in tasks}
    deletes: dict[str, list[int]] = {}
    for found in position_deletes(table, {d for t in tasks for d in t.delete_files}):
        for path, at in found.items():
            deletes.setdefault(path, []).extend(at)
    key = list(index.key)

    def read_keys(data_file: DataFile) -> np.ndarray[Any, Any]:
        return key_index.key_values(_read_columns(table, data_file, key), key)

    index.rebuild(current, data, read_keys, deletes)


def _read_columns(table: Table, data_file: DataFile, names: Sequence[str]) -> pa.Table:
    """``names`` of one data file's rows, every row in the file's order (no deletes)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    if not hasattr(data_file, "_spec_id"):  # one just written: set when read from a manifest
        data_file.spec_id = table.metadata.default_spec_id
    scan = ArrowScan(table.metadata, table.io, table.schema().select(*names), AlwaysTrue())
    return scan.to_table([FileScanTask(data_file)])


def position_deletes(table: Table, delete_files: Iterable[DataFile]) -> list[dict[str, list[int]]]:
    """Each position delete file's positions, by the data file path they delete from."""
    import pyarrow.parquet as pq

    out = []
    for delete_file in delete_files:
        with table.io.new_input(delete_file.file_path).open() as stream:
            rows = pq.read_table(stream, columns=["file_path", "pos"])
        found: dict[str, list[int]] = {}
        for path, pos in zip(rows["file_path"].to_pylist(), rows["pos"].to_pylist(),
                             strict=True):  # fmt: skip
            found.setdefault(path, []).append(pos)
        out.append(found)
    return out


def append(spec: LakeSpec, rows: pa.Table, version: int | None, tick: int | None,
           tick_time: datetime | None = None) -> int:  # fmt: skip
    table = _table(spec)
    props = _props(version, tick, tick_time)
    table.append(rows.cast(table.schema().as_arrow()), snapshot_properties=props)
    appended: int = rows.num_rows
    return appended


def multiset(spec: LakeSpec, inserts: pa.Table, deletes: pa.Table, version: int | None, tick: int,
             tick_time: datetime | None = None) -> tuple[int, int]:  # fmt: skip
    """A table without a key: rewritten in one commit (each delete image removes one
    equal row, then the inserts are added)."""
    import pyarrow as pa

    if not deletes.num_rows:
        return append(spec, inserts, version, tick, tick_time), 0
    table = _table(spec)
    schema = table.schema().as_arrow()
    here = table.scan().to_arrow().cast(schema)
    kept, removed = rows_kept_after_deletes(here, deletes.cast(schema))
    result = pa.concat_tables([here.take(kept), inserts.cast(schema)])
    table.overwrite(result, snapshot_properties=_props(version, tick, tick_time))
    return inserts.num_rows, removed


def truncate(spec: LakeSpec, version: int, tick: int) -> int:
    from pyiceberg.expressions import AlwaysTrue

    table = _table(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table.delete(AlwaysTrue(), snapshot_properties=_props(version, tick))
    return 0


def data_dir(spec: LakeSpec) -> str:
    from pgferry.lake import storage

    return storage.join(spec.location, "data")


def new_file_name(range_no: int) -> str:
    return f"load-{range_no:05d}-{uuid.uuid4().hex}.parquet"


def commit_files(
    spec: LakeSpec, files: Sequence[tuple[str, int, int]], schema: pa.Schema, tick: int
) -> None:
    """The initial load: every row replaced by ``files`` (in :func:`data_dir`) in ONE
    commit, which resets the replay version below every tick."""
    from pyiceberg.expressions import AlwaysTrue

    table = _table(spec)
    props = _props(0, tick)
    from pgferry.lake import storage

    paths = [storage.join(data_dir(spec), path) for path, _, _ in files]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with table.transaction() as tx:
            tx.delete(AlwaysTrue(), snapshot_properties=props)
            if paths:
                tx.add_files(paths, snapshot_properties=props)
            else:  # an empty source: still one snapshot carrying the version
                tx.append(schema.empty_table(), snapshot_properties=props)


def read(spec: LakeSpec, tick: int | None = None) -> pa.Table:
    table = _table(spec)
    if tick is None:
        return table.scan().to_arrow()
    for snap in _ancestry(table):
        at = snap.summary.additional_properties.get(TICK) if snap.summary else None
        if at is None or int(at) <= tick:
            return table.scan(snapshot_id=snap.snapshot_id).to_arrow()
    return table.scan().to_arrow().slice(0, 0)


def maintain(spec: LakeSpec, compact_every: int, keep_hours: int) -> bool:
    """Every ``compact_every`` snapshots: rewrite the table into few files and expire
    snapshots older than ``keep_hours``."""
    table = _table(spec)
    if compact_every <= 0 or len(table.snapshots()) % compact_every:
        return False
    compact(spec, keep_hours)
    return True


def compact(spec: LakeSpec, keep_hours: int | None = None) -> dict[str, Any]:
    """Rewrite the current rows (position deletes applied) as the table's only data files,
    sorted by the key, in one snapshot that removes every data and delete file before it
    (pyiceberg has no rewrite of data files yet), keeping the replay version; then expire
    old snapshots."""
    from pgferry.lake import iceberg_commit

    table = _table(spec)
    current = table.current_snapshot()
    props = dict(current.summary.additional_properties) if current and current.summary else {}
    keep = {k: v for k, v in props.items() if k in (VERSION, TICK, TICK_TIME)}
    rows = table.scan().to_arrow()
    key = table.properties.get(KEY)
    if key and json.loads(key) and rows.num_rows:
        # Files clustered by key: a reader filtering on it prunes files by their bounds.
        rows = rows.sort_by([(k, "ascending") for k in json.loads(key)])
    iceberg_commit.rewrite(table, rows.cast(table.schema().as_arrow()), keep)
    if keep_hours is not None:
        table = _table(spec)
        older = datetime.now(UTC) - timedelta(hours=keep_hours)
        table.maintenance.expire_snapshots().older_than(older).commit()
    return {"rows": rows.num_rows}


def tick_time_of(spec: LakeSpec, tick: int) -> datetime | None:
    """The provider's time of ``tick`` recorded by the newest snapshot of that tick in the
    current line that records one (None: none does, e.g. snapshots of an older pgferry)."""
    for snap in _ancestry(_table(spec)):
        props = snap.summary.additional_properties if snap.summary else {}
        at = props.get(TICK)
        if at is None or int(at) > tick:
            continue  # a snapshot of a later tick
        if int(at) < tick:
            return None
        found = props.get(TICK_TIME)
        if found:  # else a repair's commit (no time) or one of an older pgferry
            return datetime.fromisoformat(found)
    return None


def newest_tick(spec: LakeSpec) -> int | None:
    """The tick recorded by the current snapshot (None: none recorded)."""
    snap = _table(spec).current_snapshot()
    at = snap.summary.additional_properties.get(TICK) if snap and snap.summary else None
    return int(at) if at is not None else None


def repair(
    spec: LakeSpec, source: pa.Table, key: Sequence[str], version: int | None, tick: int
) -> None:
    """A repair's fix as ONE commit: the keys of ``source``'s ``D`` rows deleted and its
    ``I`` rows appended, in one transaction whose snapshots carry the replay ``version``
    found before (so exactly-once is untouched) and the tick."""
    import pyarrow.compute as pc

    table = _table(spec)
    props = _props(version, tick)
    gone = source.filter(pc.equal(source[OP], "D"))
    rows = source.filter(pc.equal(source[OP], "I")).drop([OP]).cast(table.schema().as_arrow())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "delete did not match any records"
        with table.transaction() as tx:
            if gone.num_rows:
                tx.delete(_key_filter(gone, key), snapshot_properties=props)
            if rows.num_rows:
                tx.append(rows, snapshot_properties=props)
