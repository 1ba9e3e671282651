"""add-table, remove-table and missing: registry changes checked against the node.

Every operation runs in one local transaction: a bad name, a bad trigger option, a missing
key column or an unreachable provider leaves the registry and the triggers exactly as they
were.  On the root a table's capture spec (:mod:`pgferry.registry.capture_spec`) is settled and
stored with it; a subscriber copies its provider's.  A removal on a root or branch travels
to its subscribers as an event (:func:`removed_upstream` is what they do with it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import psycopg
from psycopg import sql

from pgferry import expressions, settings
from pgferry.config import Config
from pgferry.errors import NodeError, TableError, UsageError
from pgferry.events import REMOVE_TABLE_EVENT
from pgferry.handlers import Handler
from pgferry.handlers.api import Configured
from pgferry.node import (
    addopts,
    capture,
    connect,
    copymode,
    copynode,
    handlerops,
    merge,
    model,
    readd,
)
from pgferry.node.addopts import AddTableOptions
from pgferry.queue import api as queue_api
from pgferry.registry import catalog, entries
from pgferry.registry.names import NamePattern, parse_pattern, split_qualified

log = logging.getLogger(__name__)


def resolve(
    patterns: Iterable[NamePattern],
    candidates: list[tuple[str, str]],
    what: str,
    skip: str | None = None,
) -> list[tuple[str, str]]:
    """Every candidate named by the patterns, in order, each once; unknown names fail, or
    with ``skip`` (where they are missing: --skip-non-existing) are left out with a warning."""
    chosen: list[tuple[str, str]] = []
    for pattern in patterns:
        found = pattern.select(candidates)
        if not found and not pattern.is_glob and skip is None:
            raise TableError(f"{what} not found: {pattern.raw}")
        if not found and not pattern.is_glob:
            log.warning("%s not found %s: %s, skipped", what, skip, pattern.raw)
        elif not found:
            log.warning("no %s matches %s", what.lower(), pattern.raw)
        chosen += [c for c in found if c not in chosen]
    return chosen


def limit_lock_wait(config: Config, conn: psycopg.Connection) -> None:
    """Attaching triggers locks the table: wait at most ``lock_timeout`` seconds for it,
    rather than queueing behind a long transaction while blocking every writer."""
    seconds = config.get(settings.LOCK_TIMEOUT)
    conn.execute("select set_config('lock_timeout', %s, true)", (f"{int(seconds * 1000)}ms",))


def provider_conn(config: Config, node: model.NodeInfo) -> psycopg.Connection:
    if node.provider_location is None:
        raise NodeError(f"Node {node.node_name} has no provider location")
    return connect.connect_remote(config, node.provider_location)


def add_tables(
    config: Config, conn: psycopg.Connection, args: list[str], opts: AddTableOptions
) -> list[str]:
    """Register tables on the local node; returns the names added (``%I.%I``)."""
    queue = connect.queue_name(config)
    node = model.require_node(conn, queue)
    limit_lock_wait(config, conn)
    if not args and not opts.all:
        raise UsageError("add-table: give TABLE names or --all")
    chosen = handlerops.choose(
        config, opts.handler, opts.handler_args, root=node.is_root, command="add-table"
    )
    addopts.check(opts, node, chosen[1])
    if node.is_root:
        return _add_on_root(conn, node, args, opts, chosen)
    added: list[str] = []
    for part in merge.parts(conn, node) if opts.merge_all else [node]:
        with provider_conn(config, part) as prov:
            names = _add_on_subscriber(conn, prov, part, args, opts, chosen)
        if opts.copy_node and names:  # in the same transaction: a refusal registers nothing
            copynode.check(copynode.dsn_of(config), conn, part, names, opts.copy_node)
        added += names
    return added


def _skip(opts: AddTableOptions, where: str) -> str | None:
    return where if opts.skip_non_existing else None


def _split_all(names: Iterable[str]) -> list[tuple[str, str]]:
    return [split_qualified(n) for n in names]


def _add_on_root(
    conn: psycopg.Connection,
    node: model.NodeInfo,
    args: list[str],
    opts: AddTableOptions,
    chosen: tuple[Configured, Handler],
) -> list[str]:
    queue, (configured, handler) = node.queue_name, chosen
    spec = capture.root_spec(opts.trigger_flags, opts.trigger_args, opts.no_triggers, handler)
    fq_of = {t.key: t.fq for t in catalog.list_relations(conn, "r")}
    if opts.all:
        wanted = _missing_names(conn, queue, "r")
        keys = [k for k, fq in fq_of.items() if fq in wanted]
    else:
        patterns = list(map(parse_pattern, args))
        if not handler.captures:  # nothing captured: the table need not exist
            for p in patterns:
                if not p.is_glob and not p.select(fq_of):
                    key = (p.schema.spellings()[0], p.name.spellings()[0])
                    fq_of[key] = catalog.fq_name(conn, *key)
        keys = resolve(patterns, list(fq_of), "Table", _skip(opts, "on this node"))
    group = entries.next_copy_group(conn)
    added: list[str] = []
    for key in keys:
        fq = fq_of[key]
        existing = entries.get_table(conn, queue, fq)
        if existing is not None and existing.local and not opts.force:
            readd.already_added(existing, opts, configured, root=True)
            continue
        dest = fq if handler.captures else None
        stored = handlerops.check(handler, configured, conn, None, node, fq, dest=dest)
        resolved = spec.resolve(conn, fq) if handler.captures else None
        if resolved is not None:
            attrs = capture.root_attrs(resolved, opts.trigger_flags, opts.trigger_args)
            capture.log_added(fq, resolved, existing.table_attrs if existing else None)
        else:
            attrs = {"no_triggers": True}  # the handler captures nothing
        attrs = handlerops.with_handler(attrs, stored, opts.handler is not None)
        entries.register_table(
            conn,
            entries.TableEntry(
                queue_name=queue,
                table_name=fq,
                local=True,
                merge_state="ok",
                dest_table=None,
                copy_condition=None,
                copy_snapshot=None,
                skip_truncate=opts.skip_truncate,
                table_attrs=attrs,
                copy_group=group,
                max_parallel_copy=opts.max_parallel_copy,
            ),
        )
        if resolved is not None and not resolved.no_triggers:
            capture.attach(conn, queue, fq, deny=False, spec=resolved)
        added.append(fq)
    return added


def _missing_names(conn: psycopg.Connection, queue: str, kind: str) -> set[str]:
    rows = conn.execute("select obj_kind, obj_name from ferry.local_missing(%s)", (queue,))
    return {name for k, name in rows.fetchall() if k == kind}


def _add_on_subscriber(
    conn: psycopg.Connection,
    prov: psycopg.Connection,
    node: model.NodeInfo,
    args: list[str],
    opts: AddTableOptions,
    chosen: tuple[Configured, Handler],
) -> list[str]:
    queue, (configured, handler) = node.queue_name, chosen
    prov_entries = {t.table_name: t for t in entries.list_tables(prov, queue)}
    provider_tables = list(prov_entries)
    keys = _split_all(provider_tables)
    fq_of = dict(zip(keys, provider_tables, strict=True))
    if opts.all:
        local = {t.table_name for t in entries.list_tables(conn, queue)}
        chosen = [k for k in keys if fq_of[k] not in local]
    else:
        try:
            chosen = resolve(
                map(parse_pattern, args), keys, "Table", _skip(opts, "on the provider")
            )
        except TableError as exc:
            raise TableError(f"{exc} (not registered on the provider)") from None
    if opts.copy_condition:  # refused before anything is looked up or created
        expressions.boolean_expression(opts.copy_condition, "--copy-condition")
    if opts.dest_table and len(chosen) != 1:
        raise UsageError("add-table: --dest-table needs exactly one table")
    group = entries.next_copy_group(conn)
    added: list[str] = []
    for key in chosen:
        src = fq_of[key]
        existing = entries.get_table(conn, queue, src)
        if existing is not None and existing.local and not opts.force:
            readd.already_added(existing, opts, configured, root=False)
            continue
        if not handler.needs_table:
            stored = handlerops.check(handler, configured, conn, prov, node, src)
            cap = opts.max_parallel_copy
            handlerops.register_tableless(conn, queue, src, group, cap, stored)
            added.append(src)
            continue
        copied = handler.copies and not opts.expect_sync
        if copied and not opts.copy_node:  # a copy node is checked below (copynode.check)
            handlerops.check_source(prov_entries.get(src), src, f"provider {node.provider_node}")
        condition = None
        if opts.copy_condition:
            schema, name = split_qualified(src)
            what = f"--copy-condition for {src}"
            # Stored as written (what `tables` shows); every use renders the parsed form.
            expressions.check_on_table(prov, schema, name, opts.copy_condition, what)
            condition = opts.copy_condition.strip()
        dest = _local_dest(conn, prov, src, opts, handler.makes_table)
        if dest is None:  # missing here, --skip-non-existing
            continue
        spec = capture.CaptureSpec.from_attrs(prov_entries[src].table_attrs)
        capture.check_local_key(conn, src, dest, spec)
        # The handler's checks, now that the local table is known (and created).
        stored = handlerops.check(
            handler, configured, conn, prov, node, src, dest=dest, expect_sync=opts.expect_sync
        )
        attrs: dict[str, object] = {}
        if spec is not None:
            attrs["capture"] = spec.to_dict()  # travels down the cascade with the table
        if condition:
            attrs["copy_condition"] = condition
        if opts.skip_truncate:
            attrs["skip_truncate"] = True
        if opts.no_triggers:
            attrs["no_triggers"] = True
        if opts.max_parallel_copy:
            attrs["max_parallel_copy"] = opts.max_parallel_copy
        if opts.copy_node:
            attrs["copy_node"] = opts.copy_node
        if opts.copy_mode:
            attrs["copy_mode"] = opts.copy_mode
        if opts.no_merge:
            attrs["no_merge"] = True
        merged = merge.is_merged(node, attrs)
        merge.check_registration(conn, node, src, dest, opts.no_merge)
        attrs = handlerops.with_handler(attrs, stored, opts.handler is not None)
        if opts.copy_mode == "chunked" and copied:
            why = copymode.refusal(prov, src, attrs)
            if why:
                raise UsageError(f"add-table: {src} cannot be copied in chunks: {why}")
        entries.register_table(
            conn,
            entries.TableEntry(
                queue_name=queue,
                table_name=src,
                local=True,
                merge_state=None if copied else "ok",
                dest_table=dest if dest != src else None,
                copy_condition=condition,
                copy_snapshot=None,
                # A merged table's TRUNCATE events would erase the other parts' rows.
                skip_truncate=(opts.skip_truncate and not opts.expect_sync) or merged,
                table_attrs=attrs,
                copy_group=group,
                max_parallel_copy=opts.max_parallel_copy,
            ),
        )
        if not opts.no_triggers:
            capture.attach(conn, queue, dest, deny=True)
        added.append(src)
    return added


def _local_dest(
    conn: psycopg.Connection,
    prov: psycopg.Connection,
    src: str,
    opts: AddTableOptions,
    makes_table: bool = False,
) -> str | None:
    """The local table for ``src``: --dest-table or the same name, created with --create
    or when the handler's table only gives the rows' shape (``makes_table``: the lake
    handler's) (None: missing, and skipped by --skip-non-existing)."""
    pattern = parse_pattern(opts.dest_table) if opts.dest_table else None
    if pattern is None:
        schema, name = split_qualified(src)
        candidates = [(schema, name)]
    else:
        if pattern.is_glob:
            raise UsageError("add-table: --dest-table cannot be a pattern")
        candidates = [(s, n) for s in pattern.schema.spellings() for n in pattern.name.spellings()]
    for schema, name in candidates:
        found = catalog.find_relation(conn, schema, name, "r")
        if found is not None:
            return found.fq
    if not (opts.create or opts.create_full or makes_table):
        shown = opts.dest_table or src
        if opts.skip_non_existing:
            log.warning("Table not found on local node: %s, skipped", shown)
            return None
        raise TableError(f"Table not found on local node: {shown} (use --create to create it)")
    schema, name = candidates[0]
    cols = catalog.columns(prov, src)
    pkey = catalog.primary_key(prov, src)
    defaults, left_out = catalog.column_defaults(prov, src)
    # A nextval default is carried when its sequence exists here under the same name
    # (add-seq --create made it, say): this node can become root and take inserts.
    for col, (seq_schema, seq_name) in catalog.nextval_sequences(prov, src).items():
        local_seq = catalog.find_relation(conn, seq_schema, seq_name, "S")
        if col in left_out and local_seq is not None:
            call = sql.SQL("nextval({}::regclass)").format(sql.Literal(local_seq.fq))
            defaults[col] = call.as_string(conn)
            left_out.remove(col)
    catalog.create_table(conn, schema, name, cols, pkey, defaults)
    if opts.create_full:
        catalog.create_structure(conn, schema, name, catalog.structure(prov, src))
    fq = catalog.fq_name(conn, schema, name)
    # A table made for the handler only gives the rows' shape: not news for the operator.
    log.log(logging.DEBUG if makes_table and not opts.create else logging.INFO,
            "Created table %s", fq)  # fmt: skip
    if left_out:  # the source's sequences are not this database's
        log.warning("Table %s: created without the default of %s (a sequence or identity of"
                    " the source)", fq, ", ".join(left_out))  # fmt: skip
    return fq


def remove_tables(
    config: Config, conn: psycopg.Connection, args: list[str], all_: bool, force: bool
) -> list[str]:
    """Detach tables from the local node; returns the names removed (``%I.%I``).

    A root or branch also queues a :data:`REMOVE_TABLE_EVENT` per table, in this same
    transaction: its subscribers drop the table when they apply it, and branches pass it
    on, so the whole subtree stops waiting for events that will never come.
    """
    queue = connect.queue_name(config)
    node = model.require_node(conn, queue)
    limit_lock_wait(config, conn)
    registered = {t.table_name: t for t in entries.list_tables(conn, queue)}
    if all_:
        names = list(registered)
    else:
        if not args:
            raise UsageError("remove-table: give TABLE names or --all")
        keys = _split_all(registered)
        fq_of = dict(zip(keys, registered, strict=True))
        names = []
        for pattern in map(parse_pattern, args):
            found = pattern.select(keys)
            if not found and not pattern.is_glob and not force:
                raise TableError(f"Table not registered: {pattern.raw}")
            names += [fq_of[k] for k in found if fq_of[k] not in names]
    for fq in names:
        _detach(conn, queue, registered[fq])
        if node.has_queue:
            queue_api.insert_event(conn, queue, REMOVE_TABLE_EVENT, fq, fq, node.node_name)
        log.info("Table removed: %s%s", fq, "" if node.has_queue else " (local)")
    return names


def _detach(conn: psycopg.Connection, queue: str, entry: entries.TableEntry) -> None:
    """Drop the table's capture or deny triggers and its registry row; its rows stay."""
    if not entry.table_attrs.get("no_triggers"):
        capture.detach(conn, queue, entry.dest_name)
    entries.unregister_table(conn, queue, entry.table_name)


def removed_upstream(conn: psycopg.Connection, queue: str, table: str) -> entries.TableEntry | None:
    """The provider removed ``table`` (a :data:`REMOVE_TABLE_EVENT` being applied): detach
    it here as remove-table does, whatever its copy state; returns its registry entry as it
    was, or None when this node did not replicate it."""
    entry = entries.get_table(conn, queue, table)
    if entry is None or not entry.local:
        return None
    _detach(conn, queue, entry)
    return entry


def missing(config: Config, conn: psycopg.Connection) -> list[tuple[str, str]]:
    """(obj_kind, obj_name): 'r' tables, 'S' sequences that could be added here."""
    queue = connect.queue_name(config)
    node = model.require_node(conn, queue)
    if node.is_root:
        rows = conn.execute("select obj_kind, obj_name from ferry.local_missing(%s)", (queue,))
        return [(r[0], r[1]) for r in rows.fetchall()]
    local_tables = {t.table_name for t in entries.list_tables(conn, queue)}
    local_seqs = {s.seq_name for s in entries.list_seqs(conn, queue)}
    with provider_conn(config, node) as prov:
        tables = [t.table_name for t in entries.list_tables(prov, queue)]
        seqs = [s.seq_name for s in entries.list_seqs(prov, queue)]
    result = [("r", t) for t in tables if t not in local_tables]
    result += [("S", s) for s in seqs if s not in local_seqs]
    return result
