"""A lake leaf's tables read by ``spark.read``: the ``pgferry-lake`` Python data source.

``pgferry.stream.lake_source.register(spark)`` once per session, then::

    spark.read.format("pgferry-lake").load("/lake/public/orders")     # newest version
    spark.read.format("pgferry-lake").option("tick", 4711).load(path)  # as of a tick
    spark.read.format("pgferry-lake").option("columns", "id,amount").load(path)

The path is a lake table pgferry writes (``DIR/<schema>/<table>``): a Delta table read
through delta-rs's log, an Iceberg table through pgferry's SQL catalog of that lake
(``DIR/pgferry_catalog.db``, or the ``catalog`` option); no jar is needed.  ``tick``
picks the newest version whose commit carries ``pgferry.tick`` at most that tick (as
``compare`` reads the lake).  A table on an object store (``s3://bucket/prefix/...``) is
reached with the options :data:`STORE_OPTIONS` names, each taken from the standard
``AWS_*`` environment when not given (:func:`pgferry.lake.storage.options`, as delta-rs
does: the environment of the Python process Spark plans the read in, which its JVM starts
with the session's environment); the plan resolves them once and the executors' tasks
carry them.
Spark redacts options named like secrets in the plans it prints; the source's own
messages mask them.

On the driver the reader lists the version's Parquet files and makes one input partition
per file; the executors read their file with pyarrow and hand Arrow batches to Spark.
An Iceberg file's columns are found by field id (pyiceberg sanitises names such as
``Mixed Col`` in its files), a Delta file's by name.
Spark (4.3) tells a Python data source no required columns: the ``columns`` option names
the ones to read (default: all).  The source takes no filters: Spark evaluates them after
the scan.  Spark 4.3 hands a later query of the same DataFrame, whose filters it cannot
push, the reader an earlier query gave its filters to, so a source that kept them would
return that query's rows (seen here: ``now.where("id > 10050")`` and then
``now.where("n > 400 or v = 'new'")`` read only keys above 10050).  An Iceberg table
written merge-on-read has position delete files: each partition carries the delete files
that apply to its data file (as pyiceberg's scan plans them), and the executor leaves out
the rows at the positions they name for that file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pgferry import settings
from pgferry.lake import storage
from pgferry.lake.spec import LakeError, LakeSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

NAME = "pgferry-lake"


def register(spark: SparkSession) -> None:
    """Make ``format("pgferry-lake")`` known to ``spark``.  The workers run the interpreter
    chosen as for the change feed (:func:`pgferry.stream.worker_python`)."""
    from pgferry.stream import register_source

    register_source(spark, LakeSource)


# option -> the node's ini setting of the same meaning (storage.options reads both)
STORE_OPTIONS = {
    "endpoint": "lake_s3_endpoint", "region": "lake_s3_region",
    "access_key_id": "lake_s3_access_key_id", "secret_access_key": "lake_s3_secret_access_key",
    "session_token": "lake_s3_session_token", "allow_http": "lake_s3_allow_http",
    "timeout": "lake_timeout",
}  # fmt: skip


@dataclass(frozen=True)
class _Table:
    """Which lake table a path is, the store's options when it is on one, and the files
    of its version of a tick.  Pickled into the reader: the executors read the files with
    the options (credentials included) the driver resolved."""

    path: str
    format: str  # delta or iceberg
    storage: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    catalog: str = ""  # Iceberg: the SQLite file of the lake's catalog

    @classmethod
    def at(cls, path: str, options: Mapping[str, str]) -> _Table:
        try:
            storage.check_scheme(path)
        except LakeError as exc:
            raise LakeError(f"{NAME}: {exc}") from None
        if not storage.is_remote(path):
            path = os.path.abspath(path.removeprefix("file://"))
            if os.path.isdir(os.path.join(path, "_delta_log")):
                return cls(path, "delta")
            if os.path.isdir(os.path.join(path, "metadata")):
                return cls(path, "iceberg", catalog=options.get("catalog", ""))
            raise LakeError(f"{NAME}: no Delta or Iceberg table at {path}")
        path = storage.root_of(path)
        given = {
            setting: options[option] for option, setting in STORE_OPTIONS.items()
            if options.get(option)
        }  # fmt: skip
        try:
            opts = storage.options(given)  # the AWS_* environment for what is not given
        except settings.BadValue as exc:
            raise LakeError(f"{NAME}: option timeout {exc}") from None
        try:
            delta = storage.is_dir(storage.join(path, "_delta_log"), opts)
            found = delta or storage.is_dir(storage.join(path, "metadata"), opts)
        except LakeError as exc:  # a missing bucket, refused keys, a store that is away
            raise LakeError(f"{NAME}: {exc}") from None
        if delta:
            return cls(path, "delta", opts)
        if found:
            catalog = options.get("catalog", "")
            if not catalog:
                raise LakeError(
                    f"{NAME}: {storage.mask(path, opts)} is an Iceberg table on a store:"
                    " give its catalog's SQLite file (option catalog: the leaf's"
                    " lake_catalog, by default CONFIG_DIR/<job_name>_iceberg_catalog.db)"
                )
            return cls(path, "iceberg", opts, catalog)
        raise LakeError(f"{NAME}: no Delta or Iceberg table at {storage.mask(path, opts)}")

    @property
    def shown(self) -> str:
        """The path as messages name it (secrets masked)."""
        return storage.mask(self.path, self.storage)

    def _spec(self) -> LakeSpec:
        parent, table = self.path.rstrip("/").rsplit("/", 1)
        root, schema = parent.rsplit("/", 1)
        return LakeSpec(self.format, root, schema, table, "", self.storage, self.catalog)

    def _delta(self, tick: int | None):
        from deltalake import DeltaTable

        remote = storage.delta_options(self.storage) if storage.is_remote(self.path) else None
        try:
            table = DeltaTable(self.path, storage_options=remote)
        except OSError as exc:
            raise LakeError(
                f"{NAME}: {self.shown} cannot be read: {storage.reason(exc, self.storage)}"
            ) from None
        if tick is not None:
            for entry in table.history():  # newest first
                at = entry.get("pgferry.tick")
                if at is None or int(at) <= tick:
                    if int(entry["version"]) != table.version():
                        table.load_as_version(int(entry["version"]))
                    break
            else:
                raise LakeError(f"{NAME}: {self.shown} holds no version of tick {tick} or before")
        return table

    def _iceberg(self, tick: int | None):
        from pyiceberg.exceptions import NoSuchTableError

        from pgferry.lake import iceberg

        spec = self._spec()
        try:
            table = iceberg.catalog(spec).load_table((spec.schema, spec.table))
        except NoSuchTableError:
            raise LakeError(
                f"{NAME}: the catalog {iceberg.catalog_file(spec)} has no table"
                f" {spec.schema}.{spec.table} (the catalog of another lake?)"
            ) from None
        snapshot = table.current_snapshot()
        if tick is not None:
            snapshot = next(
                (s for s in iceberg._ancestry(table)
                 if s.summary is None or int(s.summary.additional_properties.get(
                     iceberg.TICK, tick)) <= tick),
                None,
            )  # fmt: skip
            if snapshot is None:
                raise LakeError(f"{NAME}: {self.shown} holds no version of tick {tick} or before")
        return table, snapshot

    def arrow_schema(self, tick: int | None):
        import pyarrow as pa

        if self.format == "delta":
            return pa.schema(self._delta(tick).schema().to_arrow())
        table, snapshot = self._iceberg(tick)
        schema = table.schemas().get(snapshot.schema_id) if snapshot is not None else None
        return (schema or table.schema()).as_arrow()

    def files(self, tick: int | None, filters: Sequence[tuple[str, str, Any]]) -> list[_File]:
        """The version's data files whose statistics do not exclude ``filters`` (local
        paths, or the store's URLs)."""
        if self.format == "delta":
            table = self._delta(tick)
            uris = table.file_uris(file_pruning_predicate=list(filters) or None)
            if storage.is_remote(self.path):
                return [_File(uri) for uri in uris]
            return [_File(unquote(uri.removeprefix("file://"))) for uri in uris]
        table, snapshot = self._iceberg(tick)
        if snapshot is None:
            return []
        scan = table.scan(row_filter=_iceberg_filter(filters), snapshot_id=snapshot.snapshot_id)
        return [
            _File(task.file.file_path.removeprefix("file://"), task.file.file_path,
                  tuple(sorted(d.file_path for d in task.delete_files)))
            for task in scan.plan_files()
        ]  # fmt: skip


@dataclass(frozen=True)
class _File:
    """One input partition: a data file, and the position delete files that apply to it
    (Iceberg merge-on-read), which name it as ``name`` (the path as the metadata has it)."""

    path: str
    name: str = ""
    deletes: tuple[str, ...] = ()


def _iceberg_filter(filters: Sequence[tuple[str, str, Any]]):
    from pyiceberg import expressions as ex

    made = {
        "=": ex.EqualTo, ">": ex.GreaterThan, ">=": ex.GreaterThanOrEqual,
        "<": ex.LessThan, "<=": ex.LessThanOrEqual,
    }  # fmt: skip
    terms = [
        ex.In(name, set(value)) if op == "in" else made[op](name, value)
        for name, op, value in filters
    ]
    if not terms:
        return ex.AlwaysTrue()
    return terms[0] if len(terms) == 1 else ex.And(*terms)


def _tick(options) -> int | None:
    given = options.get("tick")
    if given is None:
        return None
    try:
        return int(given)
    except ValueError:
        raise LakeError(f"{NAME}: option tick must be a tick number, not {given!r}") from None


class LakeSource(DataSource):
    """``spark.read.format("pgferry-lake").load(PATH)``, options ``tick``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _table(self) -> _Table:
        path = self.options.get("path")
        if not path:
            raise LakeError(f"{NAME}: give the lake table's path: .load(PATH)")
        return _Table.at(path, self.options)

    def schema(self) -> StructType:
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_schema

        schema = self._table().arrow_schema(_tick(self.options))
        wanted = self.options.get("columns")
        if wanted:
            # Spark tells a Python data source no required columns: this option does.
            names = [name.strip() for name in wanted.split(",") if name.strip()]
            missing = [name for name in names if name not in schema.names]
            if missing:
                raise LakeError(f"{NAME}: no column {missing[0]!r} in {self._table().shown}")
            schema = pa.schema([schema.field(name) for name in names])
        return from_arrow_schema(schema)

    def reader(self, schema: StructType) -> LakeReader:
        return LakeReader(self._table(), _tick(self.options), schema)


class LakeReader(DataSourceReader):
    """Plans one partition per data file of the version; reads each with pyarrow."""

    def __init__(self, table: _Table, tick: int | None, schema: StructType) -> None:
        self.table = table
        self.tick = tick
        self.columns = [field.name for field in schema.fields]
        self.spark_schema = schema
        self.arrow = table.arrow_schema(tick)

    def partitions(self) -> list[InputPartition]:
        files = self.table.files(self.tick, [])
        return [InputPartition(file) for file in files]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pyspark.sql.pandas.types import to_arrow_schema

        from pgferry.lake import snapshots

        # What Spark expects: pyiceberg's large strings and field ids cast away, a
        # timestamp with a zone as its UTC instant (Spark 4.3 wants a zone named).  The
        # table's schema: columns added after a file was written read as NULL; an Iceberg
        # file's rows less those its position delete files remove.
        schema = to_arrow_schema(self.spark_schema, timezone="UTC")
        file: _File = partition.value
        yield from snapshots.read_file(
            file.path, self.table.storage, self.arrow, self.columns, schema,
            name=file.name, deletes=file.deletes,
        )  # fmt: skip
