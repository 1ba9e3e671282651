"""Reconciling a subscriber with a provider that failed over to a standby lacking ticks
this node had applied (a diverged provider, :class:`~pgferry.errors.DivergedProvider`).

Every batch of the node's own stream records its tick (id and the provider's time of it)
and the tables it changed in ``ferry_node.applied_tick``.  :func:`reconcile` walks those
records back to the newest tick the new provider holds under the same id and time: the last
tick both share.  The tables changed after it are the only ones that may differ beyond what
the new provider's later events bring.  It then, in one local transaction:

1. saves what the new provider lost: each row of those tables held here that the new
   provider lacks or holds otherwise, in ``ferry_node.lost_after_failover`` (the new
   provider's row beside, NULL when it has none), and each row held here whose key the new
   provider's events after the common tick name, written there after the failover (it may
   hold what this node held by chance: the lost change made again);
2. records the common tick as the node's position; a branch also cuts its own queue back
   to it (the ticks after it were the old provider's: its subscribers reconcile the same
   way against the ticks it makes again);
3. puts exactly those tables back to copy from the new provider (the copy machinery repairs
   them at one snapshot and hands them over to replay).

Then the provider's position is moved to the common tick and replay goes on from there for
every other table.  ``failover_reconcile = stop`` leaves all of it to the DBA.

A lake leaf's tables live in its lakes, not in its database: their rows are read from the
lake (as Arrow, compared with the provider's read with the lake's casts), and a lake table
is copied again too when its newest commit is of a tick past the common one (a worker that
stopped between the lake's commit and its own) or of a tick the provider made at another
time than the commit records.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any

import psycopg
from psycopg import sql

from pgferry.config import Config
from pgferry.errors import DivergedProvider, NodeError
from pgferry.handlers import lake
from pgferry.handlers import registry as handler_registry
from pgferry.handlers.api import HandlerContext
from pgferry.lake import formats
from pgferry.lake import spec as lake_spec
from pgferry.lake import types as lake_types
from pgferry.node import model
from pgferry.queue import api as queue_api
from pgferry.queue import ranges as queue_ranges
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import entries
from pgferry.registry.names import split_qualified
from pgferry.registry.routes import load_routes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reconciled:
    common_tick: int
    lost_tick: int
    tables: list[str]  # the tables put back to copy
    lost_rows: int  # rows saved in ferry_node.lost_after_failover


def common_tick(
    local: psycopg.Connection,
    provider: psycopg.Connection,
    queue: str,
    consumer: str,
    marks: dict[int, tuple[datetime, int]] | None = None,
) -> tuple[int, datetime | None, set[str]] | None:
    """The newest tick applied here that the provider holds as the same tick, and the
    tables changed by the batches applied after it (None: no recorded tick is shared).
    ``marks``: the provider's ticks (:func:`queue_ticks.tick_marks`), read when not given."""
    if marks is None:
        marks = queue_ticks.tick_marks(provider, queue)
    touched: set[str] = set()
    for applied in model.applied_ticks(local, queue, consumer):
        mark = marks.get(applied.tick_id)
        if mark is not None and mark[0] == applied.tick_time:
            return applied.tick_id, applied.tick_time, touched
        touched |= set(applied.tables)
    return None


def reconcile(
    local: psycopg.Connection,
    provider: psycopg.Connection,
    node: model.NodeInfo,
    config: Config | None = None,
) -> Reconciled:
    """Bring this node back in step with its diverged provider (see the module's text);
    ``config``: the node's, for its lake tables' object store."""
    queue, consumer = node.queue_name, node.consumer_name
    lost_tick = node.last_tick_id
    assert lost_tick is not None
    marks = queue_ticks.tick_marks(provider, queue)
    # One transaction from the first read (the worker's node connection is not in
    # autocommit: a read before it would leave this block a savepoint never committed).
    with local.transaction():
        found = common_tick(local, provider, queue, consumer, marks)
        if found is None:
            raise DivergedProvider(
                f"Diverged provider: no tick {consumer} applied (failover_history) is held by"
                " the provider: reposition with 'worker --reset', then resync this node's"
                " tables (resync --all)"
            )
        tick, tick_time, touched = found
        registered = {t.table_name: t for t in entries.list_tables(local, queue)}
        lakes = lake.owned_specs(
            ((t.table_name, t.table_attrs or {}) for t in registered.values()), config
        )
        past = _lakes_past(lakes, marks, tick)
        touched |= set(past)
        # The newest time of a tick applied here from the old provider, in the database
        # or in a lake: the events the new provider's application wrote come after it.
        since = max((t for t in (node.last_tick_time, *past.values()) if t), default=None)
        tables = sorted(t for t in touched if t in registered)
        _provider_settled(provider, queue, tables)
        lost = 0
        # The key replay matches each table's rows by.
        handlers = handler_registry.context(config) if config else HandlerContext()
        routes = load_routes(local, queue, handlers)
        for table in tables:
            dest = registered[table].dest_name
            route = routes.get(table)
            key = list(route.pk) if route is not None and not route.keyless else []
            if not key:
                continue  # no key to match rows by: the copy repairs it, nothing is listed
            changed = _changed_after(provider, queue, table, key, tick, since)
            where = Lost(queue, node.provider_node, table, tick, lost_tick)
            if table in lakes:
                lost += _save_lost_lake(local, provider, where, dest, key, lakes[table], changed)
            else:
                lost += _save_lost(local, provider, where, dest, key, changed)
        model.set_position(local, queue, consumer, tick, tick_time)
        model.forget_applied_after(local, queue, consumer, tick)
        if node.node_type == "branch":
            _cut_queue(local, queue, tick)
        if tables:
            entries.resync_tables(local, queue, tables)
    queue_api.rewind(provider, queue, consumer, tick)
    log.warning(
        "Diverged provider: %s applied up to tick %s, the provider holds ticks this node"
        " applied up to %s only: repositioned there, %d rows the provider lost saved in"
        " ferry_node.lost_after_failover, tables copied again: %s",
        consumer,
        lost_tick,
        tick,
        lost,
        ", ".join(tables) or "none",
    )
    return Reconciled(tick, lost_tick, tables, lost)


def _provider_settled(provider: psycopg.Connection, queue: str, tables: list[str]) -> None:
    """A provider that is a branch reconciling with its own provider copies the same tables
    again: until it holds them whole, what it lacks is not known.  NodeError: retry."""
    copying = entries.not_settled(provider, queue, tables)
    if copying:
        raise NodeError(
            f"Diverged provider: waiting for the provider to copy {', '.join(copying)} again first"
            " (its own failover reconcile)"
        )


def _cut_queue(local: psycopg.Connection, queue: str, tick: int) -> None:
    """A branch's queue cut back to ``tick``: the later ticks were the old provider's.  Its
    consumers that stood past it are put there, and so are those whose open batch ends past
    it (a subscriber applying that batch now would finish it on a tick the cut deletes, and
    stop on a position that names no tick: its finish finds no batch instead); each
    subscriber then finds its own last common tick with this branch, as this node did with
    its provider."""
    past = queue_api.consumers_past(local, queue, tick)  # locked: no batch opens meanwhile
    queue_ticks.cut_after(local, queue, tick)
    for consumer in past:
        queue_api.rewind(local, queue, consumer, tick)


def _lakes_past(
    lakes: dict[str, lake_spec.LakeSpec], marks: dict[int, tuple[datetime, int]], common: int
) -> dict[str, datetime | None]:
    """The lake tables whose newest commit is of a tick past ``common`` (a worker stopped
    between a batch's lake commit and its own: the batch is not in applied_tick), or of a
    tick the provider made at another time than the commit records: they hold changes the
    provider may lack.  With the time of that tick the commit records (None: none)."""
    past = {}
    for table, spec in lakes.items():
        held, held_time = lake.held_tick(spec)
        mark = marks.get(held)
        if held > common or (held_time is not None and mark is not None and mark[0] != held_time):
            past[table] = held_time
    return past


def _changed_after(
    provider: psycopg.Connection,
    queue: str,
    table: str,
    key: list[str],
    common: int,
    since: datetime | None,
) -> set[str]:
    """The keys (as row literals) of ``table``'s rows that the provider's events after the
    common tick changed, written after ``since`` (the time of the newest tick applied here
    from the old provider): the application wrote them on the new provider after the
    failover.  Such a row may hold by chance what this node held (the lost change made
    again, a counter raised from the same value in the same second): it is listed too.
    Events of commits the promoted standby held without their tick were written before
    ``since`` and are left out."""
    source = sql.Identifier(*split_qualified(table))
    key_row = sql.SQL("row({})::text").format(
        sql.SQL(", ").join(sql.SQL("r.{}").format(sql.Identifier(k)) for k in key)
    )
    # The table's row events first (offset 0: not flattened), then their images read as
    # its rows: another table's image may not read as this one's.
    query = sql.SQL(
        "select distinct {} from (select e.ev_data from ({}) e"
        " where e.ev_extra1 = %s and e.ev_type ~ '^[IUD]:'"
        " and (%s::timestamptz is null or e.ev_time > %s::timestamptz) offset 0) e"
        " cross join lateral jsonb_populate_record(null::{}, e.ev_data::jsonb) r"
    ).format(key_row, queue_ranges.events_after(provider, queue, common), source)
    try:
        return {r[0] for r in provider.execute(query, (table, since, since)).fetchall()}
    except psycopg.Error as exc:  # an event the source's row type cannot read: not named
        log.warning("%s: the provider's events after tick %s not read (%s): rows it wrote"
                    " after the failover are listed only where they differ", table, common,
                    str(exc).strip())  # fmt: skip
        return set()


@dataclass(frozen=True)
class Lost:
    """Where the rows saved in ferry_node.lost_after_failover come from."""

    queue: str
    provider_node: str | None
    table: str
    common_tick: int
    lost_tick: int


def _insert_lost(
    local: psycopg.Connection, where: Lost, rows: list[tuple[str, str, str | None]]
) -> int:
    """Save ``rows`` (key as a row literal, this node's row, the provider's or None)."""
    lost = [model.LostRow(k, row, theirs) for k, row, theirs in rows]
    model.save_lost(
        local, where.queue, where.provider_node, where.table, where.common_tick, where.lost_tick,
        lost,
    )  # fmt: skip
    return len(rows)


def _provider_rows(
    provider: psycopg.Connection, table: str, key: list[str], keys: Iterable[str]
) -> dict[str, str]:
    """The provider's rows of ``keys`` (row literals), as JSON text, by key."""
    wanted = list(keys)
    if not wanted:
        return {}
    query = sql.SQL("select {0}, to_jsonb(t)::text from {1} t where {0} = any(%s)").format(
        _key_row(key), sql.Identifier(*split_qualified(table))
    )
    return dict(provider.execute(query, (wanted,)).fetchall())


def _key_row(key: list[str]) -> sql.Composable:
    return sql.SQL("row({})::text").format(sql.SQL(", ").join(map(sql.Identifier, key)))


def _save_lost(
    local: psycopg.Connection,
    provider: psycopg.Connection,
    where: Lost,
    dest: str,
    key: list[str],
    changed: set[str],
) -> int:
    """Rows of ``dest`` here that the table on the provider lacks or holds otherwise, or
    whose key is in ``changed``, saved in ferry_node.lost_after_failover; their count.  The
    provider's rows are read as a digest per key (its side is read once, whole), then in
    full for the rows saved."""
    dest_id = sql.Identifier(*split_qualified(dest))
    source_id = sql.Identifier(*split_qualified(where.table))
    key_row = _key_row(key)
    digests = sql.SQL("select {}, md5(to_jsonb(t)::text) from {} t")
    theirs: dict[str, str] = dict(provider.execute(digests.format(key_row, source_id)).fetchall())
    ours = local.execute(
        sql.SQL("select {}, md5(to_jsonb(t)::text), to_jsonb(t)::text from {} t").format(
            key_row, dest_id
        )
    ).fetchall()
    differ = [(k, row) for k, digest, row in ours if theirs.get(k) != digest or k in changed]
    if not differ:
        return 0
    on_provider = _provider_rows(provider, where.table, key, (k for k, _ in differ if k in theirs))
    return _insert_lost(local, where, [(k, row, on_provider.get(k)) for k, row in differ])


def _save_lost_lake(
    local: psycopg.Connection,
    provider: psycopg.Connection,
    where: Lost,
    dest: str,
    key: list[str],
    spec: lake_spec.LakeSpec,
    changed: set[str],
) -> int:
    """As :func:`_save_lost` for a lake table: its rows are read from the lake, the
    provider's with the lake's casts, and compared as the lake's compare does (Arrow
    values, by key); a lake row is saved as the leaf's shape table reads it."""
    columns = lake_types.table_columns(local, dest)
    names = [c.name for c in columns]
    if not set(key) <= set(names):
        return 0
    at = [names.index(k) for k in key]
    schema = lake_types.arrow_schema(columns)
    query = sql.SQL("select {}, {} from {} t").format(
        _key_row(key),
        sql.SQL(", ").join(c.select() for c in columns),
        sql.Identifier(*split_qualified(where.table)),
    )
    read = provider.execute(query).fetchall()
    typed = lake_types.rows_to_arrow(columns, [r[1:] for r in read], schema).to_pylist()
    theirs: dict[tuple[Any, ...], tuple[str, tuple[Any, ...]]] = {}
    for (key_text, *_), row in zip(read, typed, strict=True):
        values = _frozen(row)
        theirs[tuple(values[i] for i in at)] = (key_text, values)
    module = formats.module(spec.format)
    try:
        held = module.read(spec).select(names).cast(schema).to_pylist()
    except (KeyError, ValueError, TypeError, lake_spec.LakeError) as exc:
        log.warning("%s: the lake table %s not read (%s): its rows are not listed",
                    where.table, spec.name, exc)  # fmt: skip
        return 0
    differ: list[tuple[str | None, dict[str, Any]]] = []
    for row in held:
        values = _frozen(row)
        found = theirs.get(tuple(values[i] for i in at))
        if found is None:
            differ.append((None, row))
        elif found[1] != values or found[0] in changed:
            differ.append((found[0], row))
    if not differ:
        return 0
    as_rows = _as_rows(local, dest, key, [row for _, row in differ])
    on_provider = _provider_rows(provider, where.table, key, (k for k, _ in differ if k))
    saved = [
        (k or key_text, row_text, on_provider.get(k) if k else None)
        for (k, _), (key_text, row_text) in zip(differ, as_rows, strict=True)
    ]
    return _insert_lost(local, where, saved)


def _as_rows(
    local: psycopg.Connection, dest: str, key: list[str], rows: list[dict[str, Any]]
) -> list[tuple[str, str]]:
    """Lake rows (Arrow values) as (key as a row literal, the row as JSON text) read through
    the shape table's row type, as a PostgreSQL leaf's are listed; a value its type does
    not read back leaves the lake's own JSON and a key made from the values' text."""
    docs = [json.dumps(row, default=_json_value) for row in rows]
    query = sql.SQL(
        "select {}, to_jsonb(r)::text from unnest(%s::jsonb[]) with ordinality d(doc, n)"
        " cross join lateral jsonb_populate_record(null::{}, d.doc) r order by d.n"
    ).format(
        sql.SQL("row({})::text").format(
            sql.SQL(", ").join(sql.SQL("r.{}").format(sql.Identifier(k)) for k in key)
        ),
        sql.Identifier(*split_qualified(dest)),
    )
    try:
        with local.transaction():  # a savepoint: the reconcile's transaction goes on
            return [(r[0], r[1]) for r in local.execute(query, (docs,)).fetchall()]
    except psycopg.Error:
        return [
            ("(" + ",".join("" if row[k] is None else str(row[k]) for k in key) + ")", doc)
            for row, doc in zip(rows, docs, strict=True)
        ]


def _json_value(value: object) -> object:
    """A lake value JSON has no form of, as its PostgreSQL text."""
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value)  # Decimal, timedelta and the like: their text reads back


def _frozen(row: dict[str, Any]) -> tuple[Any, ...]:
    """A row's Arrow values, hashable (a list column as a tuple)."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in row.values())
