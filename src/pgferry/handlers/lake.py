"""The ``lake`` handler: a leaf's table kept in a Delta Lake or Iceberg table.

The leaf's database keeps the node's state and, per table, an empty table of the source's
definition (``add-table`` makes it when missing): its columns are what replay decodes the
events to and what the lake table is made of.  Each part of a batch that the worker
hands over (a stage of collapsed rows) becomes ONE lake commit carrying the application
version of that part (:mod:`pgferry.lake.spec`); a part whose version the lake table has
already recorded is skipped, so a worker killed between the lake commit and its
PostgreSQL commit neither loses nor repeats it.  ``docs/lakehouse.md`` has the whole story.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import sql

from pgferry import settings
from pgferry.errors import DivergedProvider
from pgferry.handlers.api import Applied, Handler, HandlerError, Param, Staged, TableCheck, Target
from pgferry.lake import formats, storage
from pgferry.lake import spec as lake_spec
from pgferry.lake import types as lake_types
from pgferry.node import model

log = logging.getLogger(__name__)


@dataclass
class LakeMemory:
    """What a worker's lake handlers keep between batches (one per worker: its
    :class:`~pgferry.handlers.api.HandlerContext`'s)."""

    # (app id) -> (tick, transaction id, next part): the parts of one attempt at one batch.
    parts: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    # Per lake table: the stage's column names last seen, and the lake's schema then (so
    # that a batch of the same shape needs no read of the lake's metadata).
    shapes: dict[str, tuple[tuple[str, ...], object]] = field(default_factory=dict)
    # Per lake table: the key it was made for, as last read (None: not recorded); replay
    # reads it once, and again before refusing.
    keys: dict[str, list[str] | None] = field(default_factory=dict)


class Lake(Handler):
    """Keep the table in a lake table (Delta Lake or Iceberg) under lake_path.

    The leaf's database holds the node's state and an empty table of the source's
    definition (add-table makes it); the rows live in DIR/<schema>/<table> (Delta) or in
    the Iceberg warehouse under DIR, a folder or an object store (s3://bucket/prefix).
    Initial load from the copy's snapshot as one lake commit; each batch one commit per
    table, exactly once (the batch's tick is recorded in the same commit).  See
    docs/lakehouse.md.
    """

    name = "lake"
    makes_table = True  # the empty table of the source's definition is the handler's own
    params = (
        Param("format", "delta or iceberg (default: the ini's lake_format)",
              choices=lake_spec.FORMATS),
        Param("path", "the lake's directory or s3://bucket/prefix (default: lake_path)"),
        Param("deletes", "Iceberg: copy-on-write or merge-on-read (default: the ini's"
              " lake_iceberg_deletes)", choices=lake_spec.ICEBERG_DELETES),
        Param("lake_format", "the format the table was added with", computed=True),
        Param("location", "the lake's directory, absolute", computed=True),
        Param("owner", "queue:node:table, recorded in the lake table", computed=True),
        Param("lake_table", "schema.table in the lake", computed=True),
        Param("catalog", "Iceberg: the catalog's SQLite file", computed=True),
    )  # fmt: skip

    # --- what the table is ---------------------------------------------------------------
    def spec(self) -> lake_spec.LakeSpec:
        schema, _, table = (self.args["lake_table"] or ".").partition(".")
        return lake_spec.LakeSpec(
            self.args["lake_format"],
            self.args["location"],
            schema,
            table,
            self.args["owner"],
            storage.options(self.config),
            self.args.get("catalog") or "",
            self.args.get("deletes") or iceberg_deletes(self.config),
        )

    def _setting(self, arg: str, setting: settings.Setting[str]) -> str:
        value = self.args.get(arg)
        if value:
            return str(value)
        return self.config.get(setting) if self.config is not None else setting.fixed

    def check(self, table: TableCheck) -> Mapping[str, str] | None:
        if table.node_type != "leaf":
            raise HandlerError("handler lake: only a leaf keeps tables in a lake")
        fmt = self._setting("format", settings.LAKE_FORMAT)
        root = self._setting("path", settings.LAKE_PATH)
        if not root:
            raise HandlerError("handler lake: no lake_path in the ini and no path= argument")
        if fmt not in lake_spec.FORMATS:
            raise HandlerError(f"handler lake: lake_format must be delta or iceberg, not {fmt}")
        module = formats.module(fmt)
        assert table.dest is not None
        columns = lake_types.table_columns(table.conn, table.dest)
        node = table.node_name or "?"
        # The lake table is named as the leaf's (--dest-table renames both).
        schema, name = table.conn.execute(
            "select n.nspname::text, c.relname::text from pg_class c"
            " join pg_namespace n on n.oid = c.relnamespace where c.oid = to_regclass(%s)",
            (table.dest,),
        ).fetchone() or ("", "")
        try:
            root = storage.root_of(root)
        except lake_spec.LakeError as exc:
            raise HandlerError(f"handler lake: {exc}") from None
        spec = lake_spec.LakeSpec(
            fmt,
            root,
            schema,
            name,
            f"{table.queue}:{node}:{table.table_name}",
            storage.options(self.config),
            _catalog(self.config, fmt, root),
            self.args.get("deletes") or iceberg_deletes(self.config),
        )
        _check_not_shared(table, spec)
        try:
            storage.writable(spec.root, spec.storage)
        except lake_spec.LakeError as exc:
            raise HandlerError(f"handler lake: {exc}") from None
        _check_one_format(spec)
        owner = module.owner_of(spec)
        if owner == "":
            raise HandlerError(f"handler lake: {spec.location} holds a {fmt} table pgferry did"
                               " not create: choose another path")  # fmt: skip
        if owner is not None and owner != spec.owner:
            raise HandlerError(
                f"handler lake: {spec.location} is the lake table of {owner.split(':')[1]}'s"
                f" {owner.split(':', 2)[2]}: two nodes cannot write one lake table"
            )
        if owner is not None and table.columns is not None:
            _check_key(module, spec, table.table_name, table.pk)
        # The empty table carries the owner marker (and the key) from now on, so a second
        # node's add-table is refused; a failed add-table leaves only it (a retry takes it).
        module.prepare(spec, lake_types.arrow_schema(columns), table.pk)
        done = {
            "lake_format": fmt, "location": spec.root, "owner": spec.owner,
            "lake_table": f"{schema}.{name}",
        }  # fmt: skip
        if spec.catalog:
            done["catalog"] = spec.catalog
        return done

    # --- replay ---------------------------------------------------------------------------
    def apply(self, staged: Staged) -> Applied:
        spec = self.spec()
        module = formats.module(spec.format)
        memory = self.context.state(LakeMemory)
        version = _next_version(memory, staged.conn, spec.app_id, staged.tick_id)
        done = module.applied_version(spec)
        if done is not None and done >= version:
            if done // lake_spec.PARTS == staged.tick_id:
                check_same_tick(module, spec, staged.tick_id, staged.tick_time,
                                staged.target.table_name)  # fmt: skip
            log.info("%s: tick %d part %d already in the lake, skipped", spec.name,
                     staged.tick_id, version % lake_spec.PARTS)  # fmt: skip
            return Applied()
        _check_not_inside(staged, spec, done)
        target = staged.target
        key = () if target.keyless else target.pk
        _check_replay_key(memory, module, spec, target.table_name, key)
        source = _read_stage(staged)
        source = _evolve(memory, module, spec, source)
        if target.keyless:
            inserts = source.filter(_ops(source, ("I", "U")))
            gone = source.filter(_ops(source, ("D", "d")))
            written, removed = module.multiset(
                spec,
                inserts.drop([lake_spec.OP]),
                gone.drop([lake_spec.OP]),
                version,
                staged.tick_id,
                staged.tick_time,
            )
        else:
            written, removed = module.merge(
                spec, source, target.pk, version, staged.tick_id, staged.tick_time
            )
        self._maintain(module, spec)
        return Applied(upserts=written, deletes=removed)

    def truncated(self, conn, target: Target, tick_id: int) -> None:
        spec = self.spec()
        version = _next_version(self.context.state(LakeMemory), conn, spec.app_id, tick_id)
        module = formats.module(spec.format)
        done = module.applied_version(spec)
        if done is not None and done >= version:
            return
        module.truncate(spec, version, tick_id)

    def _maintain(self, module, spec: lake_spec.LakeSpec) -> None:
        if self.config is None:
            return
        every = self.config.get(settings.LAKE_COMPACT_INTERVAL)
        keep = self.config.get(settings.LAKE_KEEP_HOURS)
        if every and module.maintain(spec, every, keep):
            log.info("%s: compacted, history older than %d hours vacuumed", spec.name, keep)


def check_same_tick(
    module, spec: lake_spec.LakeSpec, tick: int, provider_time: datetime | None, table: str
) -> None:
    """DivergedProvider unless the lake's commit of ``tick`` was made for the provider's
    tick of that id made at ``provider_time``: a lake commit written past the node's
    recorded tick (its worker stopped between the two commits) whose tick the provider
    then lost in a failover holds changes the provider no longer has.  A commit of an
    older pgferry records no time: not checked."""
    if provider_time is None:
        return
    recorded = module.tick_time_of(spec, tick)
    if recorded is None or recorded == provider_time:
        return
    raise DivergedProvider(
        f"Diverged provider: lake table {spec.name} holds tick {tick} made at {recorded},"
        f" but the provider's tick {tick} was made at {provider_time}: the provider lost"
        f" that tick after the lake committed it; resync {table} (see docs/failover.md)"
    )


def _check_not_inside(staged: Staged, spec: lake_spec.LakeSpec, done: int | None) -> None:
    """Refuse a batch inside which the lake table already holds a tick: a batch written to
    the lake and never recorded (its worker stopped between the two commits), then read
    again over other tick bounds (from another provider).  Part of it is in the lake and
    cannot be told from the rest: written again, a keyless table's rows would be doubled.
    A keyed table's MERGE of the batch's last image of each key is right either way."""
    if done is None or not staged.target.keyless:
        return
    start = model.batch_start(staged.conn)
    held = done // lake_spec.PARTS
    if start is not None and start < held < staged.tick_id:
        raise HandlerError(
            f"handler lake: {spec.name} already holds tick {held}, inside this batch (ticks"
            f" {start} to {staged.tick_id}): a batch was written to the lake but not recorded"
            " before the node moved to another provider; its changes would be written twice:"
            f" resync {staged.target.table_name}"
        )


def _lake_specs(tables: Iterable[tuple[str, Mapping[str, Any]]], config=None):
    """(table name, spec) of the lake tables among ``tables`` ((name, table_attrs) of
    registry entries); ``config`` the node's, for an object store's settings."""
    for name, attrs in tables:
        args = attrs.get("handler_args") if attrs.get("handler") == "lake" else None
        if not args or not args.get("lake_table"):
            continue
        schema, _, table = args["lake_table"].partition(".")
        fmt, location, owner = args["lake_format"], args["location"], args["owner"]
        yield name, lake_spec.LakeSpec(
            fmt, location, schema, table, owner, storage.options(config),
            args.get("catalog") or "", args.get("deletes") or iceberg_deletes(config),
        )  # fmt: skip


def owned_specs(
    tables: Iterable[tuple[str, Mapping[str, Any]]], config=None
) -> dict[str, lake_spec.LakeSpec]:
    """Every lake table among ``tables`` ((name, table_attrs) of registry entries) that is
    the node's own (the lake table records this node as its owner), by replicated table
    name; ``config`` the node's (an object store's)."""
    found = {}
    for name, spec in _lake_specs(tables, config=config):
        if formats.module(spec.format).owner_of(spec) == spec.owner:
            found[name] = spec
    return found


def held_tick(spec: lake_spec.LakeSpec) -> tuple[int, datetime | None]:
    """The tick of the lake table's newest replay commit (0 after a load or none) and the
    provider's time of it that the commit records (None: not recorded)."""
    module = formats.module(spec.format)
    done = module.applied_version(spec)
    held = done // lake_spec.PARTS if done is not None else 0
    return held, (module.tick_time_of(spec, held) if held else None)


def held_ahead(
    tables: Iterable[tuple[str, Mapping[str, Any]]], position: int | None, config=None
) -> int | None:
    """The lowest tick past the node's ``position`` that one of its lake tables holds
    (None: none is ahead); ``tables``: (name, table_attrs) of the node's tables the main
    stream replays (state ok: one still catching up after its copy has its own consumer,
    which the main stream meets at its tick anyway).  A lake table is ahead of the
    position when its worker stopped between the lake commit of a batch and the
    PostgreSQL commit that records the batch's tick; read where the worker starts again,
    so that its next batch ends exactly there (the tables that hold it then skip it) even
    when the node has moved to another provider meanwhile, whose batches have other
    bounds."""
    if position is None:
        return None
    ahead = None
    for _name, spec in _lake_specs(tables, config):
        module = formats.module(spec.format)
        if module.owner_of(spec) != spec.owner:
            continue
        done = module.applied_version(spec)
        held = done // lake_spec.PARTS if done is not None else 0
        if held > position and (ahead is None or held < ahead):
            ahead = held
    return ahead


def check_held(tables: Iterable[tuple[str, Mapping[str, Any]]], tick: int,
               provider_time: datetime | None, config=None) -> None:  # fmt: skip
    """DivergedProvider when a lake table of the node holding ``tick`` (past the node's
    position: :func:`held_ahead`, ``tables`` as there) recorded another time for it than
    the provider's."""
    for name, spec in _lake_specs(tables, config):
        module = formats.module(spec.format)
        if module.owner_of(spec) != spec.owner:
            continue
        done = module.applied_version(spec)
        if done is not None and done // lake_spec.PARTS == tick:
            check_same_tick(module, spec, tick, provider_time, name)


def _next_version(memory: LakeMemory, conn, app_id: str, tick: int) -> int:
    """The version of the next part of this attempt at the batch ending at ``tick``: parts
    count from 0 in each transaction (a retried batch numbers its parts the same way)."""
    row = conn.execute("select txid_current()").fetchone()
    xid = int(row[0]) if row else 0
    last = memory.parts.get(app_id)
    part = last[2] if last is not None and last[:2] == (tick, xid) else 0
    if part >= lake_spec.PARTS:
        raise HandlerError(f"handler lake: more than {lake_spec.PARTS} parts in one batch")
    memory.parts[app_id] = (tick, xid, part + 1)
    return tick * lake_spec.PARTS + part


def _ops(table, ops: tuple[str, ...]):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.is_in(table[lake_spec.OP], value_set=pa.array(ops))


def _read_stage(staged: Staged):
    """The stage as an Arrow table: the op column first, then the lake columns."""
    conn = staged.conn
    rel = staged.relation.as_string(conn)
    columns = lake_types.table_columns(conn, rel, staged.target.columns)
    every = (lake_types.LakeColumn(lake_spec.OP, "text", "string", False), *columns)
    if lake_types.csv_ready(every):  # as the load: COPY text parsed by Arrow
        import pyarrow as pa

        schema = lake_types.arrow_schema(every)
        query = sql.SQL("copy (select op::text, {} from {}) to stdout (format csv)").format(
            sql.SQL(", ").join(lake_types.csv_select(c) for c in columns), staged.relation
        )
        with conn.cursor() as cur, cur.copy(query) as copy:
            try:
                tables = list(lake_types.csv_tables(copy, every, schema))
            except pa.ArrowInvalid as exc:  # a value without a lake value: infinity, BC
                first = str(exc).splitlines()[0]
                raise HandlerError(f"handler lake: {staged.target.table_name}: {first}") from None
        return pa.concat_tables(tables) if tables else schema.empty_table()
    query = sql.SQL("select op::text, {} from {}").format(
        sql.SQL(", ").join(c.select() for c in columns), staged.relation
    )
    return lake_types.rows_to_arrow(every, conn.execute(query).fetchall())


def _evolve(memory: LakeMemory, module, spec: lake_spec.LakeSpec, source):
    """Follow a change of the leaf's table (a captured or executed ALTER TABLE) additively:
    a column the lake lacks is added to it (nullable), and a column the table no longer
    has stays in the lake, NULL in the rows written from now on.  A type change is not
    followed: the write fails."""
    import pyarrow as pa

    names = tuple(n for n in source.schema.names if n != lake_spec.OP)
    seen = memory.shapes.get(spec.location)
    if seen is not None and seen[0] == names:
        lake = seen[1]
    else:
        lake = module.arrow_schema(spec)
        new = [
            f.with_nullable(True)
            for f in source.schema
            if f.name not in (*lake.names, lake_spec.OP)
        ]
        if new:
            log.info("%s: columns added to the lake table: %s", spec.name,
                     ", ".join(f.name for f in new))  # fmt: skip
            module.add_columns(spec, new)
            lake = module.arrow_schema(spec)
        memory.shapes[spec.location] = (names, lake)
    if names == tuple(lake.names):
        return source
    for column in lake:
        if column.name not in names:
            source = source.append_column(column, pa.nulls(source.num_rows, type=column.type))
    # In the lake's order: a cast to the lake's schema needs it.
    return source.select([lake_spec.OP, *lake.names])


def _check_not_shared(table: TableCheck, spec: lake_spec.LakeSpec) -> None:
    """No other table of this node writes the same lake table."""
    for name, attrs in table.registered:
        args = attrs.get("handler_args") or {}
        if (
            attrs.get("handler") == "lake" and name != table.table_name
            and args.get("location") == spec.root and args.get("lake_table") == spec.name
        ):  # fmt: skip
            raise HandlerError(f"handler lake: {name} already writes {spec.location}")


def _check_one_format(spec: lake_spec.LakeSpec) -> None:
    """No table of the other format at this table's location: two leaves given the same
    lake_path, one writing Delta and one Iceberg, would write one directory."""
    found = formats.other_format(spec)
    if found is None:
        return
    fmt, owner = found
    parts = owner.split(":", 2)
    whose = f"node {parts[1]}'s {parts[2]}" if len(parts) == 3 else "a table pgferry did not make"
    raise HandlerError(
        f"handler lake: {spec.location} already holds the {fmt} table of {whose}: one lake"
        f" path cannot hold both formats' tables, give this node another lake_path"
    )


def _key_changed(name: str, spec: lake_spec.LakeSpec, key, made) -> HandlerError:
    def shown(k) -> str:
        return f"({', '.join(k)})" if k else "no key"

    return HandlerError(
        f"handler lake: {name}'s key is {shown(key)} but its lake table {spec.location} was"
        f" made for {shown(made)}: move the lake table away (or give --dest-table) and"
        " add the table again"
    )


def _check_key(module, spec: lake_spec.LakeSpec, name: str, key) -> None:
    """Refuse a table whose key is not the one its lake table was made for (a MERGE on
    another key would write wrong rows); a table of an older pgferry gets it recorded."""
    made = module.key_of(spec)
    if made is None:
        module.record_key(spec, key)
    elif list(made) != list(key):
        raise _key_changed(name, spec, key, made)


def _check_replay_key(memory: LakeMemory, module, spec: lake_spec.LakeSpec, name: str, key) -> None:
    known = memory.keys
    made = known.get(spec.location, [])
    if spec.location not in known or (made is not None and list(made) != list(key)):
        made = known[spec.location] = module.key_of(spec)  # read again before refusing
    if made is not None and list(made) != list(key):
        raise _key_changed(name, spec, key, made)


def iceberg_deletes(config) -> str:
    """``lake_iceberg_deletes``: how an Iceberg table's batches replace and delete rows."""
    if config is None:
        return lake_spec.MERGE_ON_READ
    return config.get(settings.LAKE_ICEBERG_DELETES)


def _catalog(config, fmt: str, root: str) -> str:
    """Iceberg on object storage: the local SQLite file of the catalog (``lake_catalog``,
    by default beside the ini); "" for a local lake (DIR/pgferry_catalog.db)."""
    if fmt != "iceberg" or not storage.is_remote(root):
        return ""
    given = config.get(settings.LAKE_CATALOG) if config is not None else ""
    if not given:
        # config_dir is set by the ini's reader (config.load_config), not a setting.
        base = config.values.get("config_dir", "") if config is not None else ""
        job = config.job_name if config is not None else "lake"
        given = os.path.join(base or os.getcwd(), f"{job}_iceberg_catalog.db")
    path = os.path.abspath(os.path.expanduser(given))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def check_resync(tables: Iterable[tuple[str, Mapping[str, Any]]], source_key: Callable,
                 config=None) -> None:  # fmt: skip
    """``resync`` refuses a lake table of ``tables`` ((name, table_attrs) of the tables
    resynced) whose key on the provider (``source_key(table)``) is no longer the one its
    lake table was made for (one line, before anything changes)."""
    for name, spec in _lake_specs(tables, config):
        module = formats.module(spec.format)
        made = module.key_of(spec) if module.owner_of(spec) else None
        key = source_key(name)
        if made is not None and list(made) != list(key):
            raise _key_changed(name, spec, key, made)
