"""A table's handler on this node: chosen by add-table, replaced by change-handler.

``--handler NAME --handler-arg K=V ...`` is checked in full before anything is looked up
(:func:`choose`): an unknown handler, an unknown, repeated or missing argument or a bad
value is one error and nothing is registered.  Then, per table, the handler's own checks
against the databases (:func:`check`) run inside the command's transaction.  The choice is
stored in the table's ``table_attrs`` (``handler``, ``handler_args``) of this node only: a
subscriber's handler is its own add-table's, never inherited from its provider.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from pgferry.config import Config
from pgferry.errors import NodeError, TableError, UsageError
from pgferry.handlers import Handler, TableCheck
from pgferry.handlers import registry as handler_registry
from pgferry.handlers.api import Configured
from pgferry.node import capture, connect, model
from pgferry.registry import catalog, entries
from pgferry.registry.names import parse_pattern, split_qualified

log = logging.getLogger(__name__)

HANDLER_KEYS = ("handler", "handler_args")


def choose(
    config: Config, name: str | None, args: list[str] | None, *, root: bool, command: str
) -> tuple[Configured, Handler]:
    """The handler of a command line, checked (UsageError / HandlerError otherwise)."""
    context = handler_registry.context(config)
    configured = handler_registry.configure(name, list(args or ()), context)
    handler = handler_registry.build(configured, context, computed=False)
    if root and not handler.on_root:
        raise UsageError(
            f"{command}: handler {handler.name} is for branch and leaf nodes only"
            " (a root replays nothing)"
        )
    return configured, handler


def check(
    handler: Handler,
    configured: Configured,
    conn: psycopg.Connection,
    prov: psycopg.Connection | None,
    node: model.NodeInfo,
    table: str,
    *,
    dest: str | None = None,
    expect_sync: bool = False,
) -> Configured:
    """The handler's checks of ``table`` (its source: the provider's, or the root's own;
    ``dest``: the local table); returns what to store for this table: ``configured`` with
    the computed arguments the check gave."""
    source = prov if prov is not None else conn
    found = source.execute("select to_regclass(%s) is not null", (table,)).fetchone()
    columns: tuple[str, ...] | None = None
    pk: tuple[str, ...] = ()
    if found and found[0]:
        columns = tuple(c.name for c in catalog.columns(source, table))
        pk = tuple(catalog.primary_key(source, table))
    values = handler.check(
        TableCheck(
            conn,
            prov,
            table,
            columns,
            pk,
            node.node_type,
            node.queue_name,
            dest,
            expect_sync,
            node_name=node.node_name,
            registered=tuple(
                (e.table_name, e.table_attrs or {}) for e in entries.every_table(conn)
            ),
        )  # fmt: skip
    )
    table_configured = handler_registry.with_computed(configured, values)
    if values:
        handler_registry.build(table_configured, handler.context)  # as replay will build it
    return table_configured


def with_handler(attrs: dict[str, Any], configured: Configured, given: bool) -> dict[str, Any]:
    """``attrs`` storing ``configured`` (nothing stored for the default when not named)."""
    out = {k: v for k, v in attrs.items() if k not in HANDLER_KEYS}
    if given:
        out.update(handler_registry.to_attrs(configured))
    return out


def check_source(prov_entry: entries.TableEntry | None, table: str, provider: str) -> None:
    """A table to be copied needs a provider holding its rows."""
    if prov_entry is not None and not handler_registry.stores_rows(prov_entry.table_attrs):
        held = prov_entry.table_attrs.get("handler")
        raise TableError(
            f"Table {table}: {provider} keeps no rows of it (handler {held}), so it cannot"
            " be copied from there; add it with --expect-sync (or a handler without a table)"
        )


def register_tableless(
    conn: psycopg.Connection,
    queue: str,
    src: str,
    group: int,
    max_parallel_copy: int | None,
    configured: Configured,
) -> None:
    """A table whose handler keeps no local table: no table, no trigger, no copy."""
    attrs = with_handler({"no_triggers": True}, configured, True)
    entries.register_table(
        conn,
        entries.TableEntry(
            queue_name=queue, table_name=src, local=True, merge_state="ok", dest_table=None,
            copy_condition=None, copy_snapshot=None, skip_truncate=False, table_attrs=attrs,
            copy_group=group, max_parallel_copy=max_parallel_copy,
        ),
    )  # fmt: skip


def change_handler(
    config: Config,
    conn: psycopg.Connection,
    table: str,
    name: str,
    args: list[str],
    trigger_flags: str | None = None,
    trigger_args: tuple[str, ...] | None = None,
) -> bool:
    """Replace a table's handler on this node; False when nothing changed.  On the root
    ``trigger_flags`` / ``trigger_args`` (given: not None) replace the table's stored trigger
    options, and the capture is made again when that changes it."""
    queue = connect.queue_name(config)
    node = model.require_node(conn, queue)
    retrigger = trigger_flags is not None or trigger_args is not None
    if retrigger and not node.is_root:
        raise UsageError(
            "change-handler: --trigger-flags and --trigger-arg are for the root"
            " (a subscriber takes its provider's capture)"
        )
    registered = {t.table_name: t for t in entries.list_tables(conn, queue)}
    keys = [split_qualified(n) for n in registered]
    pattern = parse_pattern(table)
    found = [] if pattern.is_glob else pattern.select(keys)
    if not found:
        raise TableError(f"Table not added on this node: {table}")
    entry = registered[dict(zip(keys, registered, strict=True))[found[0]]]
    configured, handler = choose(config, name, args, root=node.is_root, command="change-handler")
    old = handler_registry.stored(entry.table_attrs)
    if old == configured and not retrigger:
        log.info("Table %s: handler unchanged (%s)", entry.table_name, configured.name)
        return False
    if retrigger and not handler.captures:
        raise UsageError(
            f"change-handler: handler {handler.name} captures nothing: no --trigger-flags or"
            " --trigger-arg"
        )
    before = handler_registry.build(old, handler.context)
    # A subscriber's table exists for one and not the other; a root's is captured by one.
    kind = "captures" if node.is_root else "needs_table"
    if getattr(before, kind) != getattr(handler, kind):
        what = "captures the table" if node.is_root else "keeps a local table"
        raise TableError(
            f"change-handler: {entry.table_name}: only one of {before.name} and"
            f" {handler.name} {what}: remove-table and add-table it again"
        )
    prov = None
    if not node.is_root:
        if node.provider_location is None:
            raise NodeError(f"Node {node.node_name} has no provider location")
        prov = connect.connect_remote(config, node.provider_location)
    dest = (entry.dest_table or entry.table_name) if handler.needs_table else None
    try:
        configured = check(handler, configured, conn, prov, node, entry.table_name, dest=dest)
    finally:
        if prov is not None:
            prov.close()
    if old == configured and not retrigger:  # the same once computed (a rule file read again)
        log.info("Table %s: handler unchanged (%s)", entry.table_name, configured.name)
        return False
    handler = handler_registry.build(configured, handler.context)
    attrs = with_handler(entry.table_attrs, configured, True)
    if node.is_root and handler.captures:
        attrs = _recapture(conn, queue, entry, attrs, handler, trigger_flags, trigger_args)
    if attrs == entry.table_attrs:
        log.info("Table %s: handler and capture unchanged", entry.table_name)
        return False
    entries.set_table_attrs(conn, queue, entry.table_name, attrs)
    if handler.needs_table and _filters(before) != _filters(handler):
        log.warning(
            "Table %s: the rows here were chosen by the previous handler; "
            "'resync %s' copies them again",
            entry.table_name,
            entry.table_name,
        )
    log.info("Table %s: handler %s", entry.table_name, configured.name)
    return True


def _recapture(
    conn: psycopg.Connection,
    queue: str,
    entry: entries.TableEntry,
    attrs: dict[str, Any],
    handler: Handler,
    new_flags: str | None = None,
    new_args: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """A root's capture as the new handler asks for it (with the table's own trigger
    options, or the new ones given); the triggers are made again when that changes it."""
    flags = entry.table_attrs.get("tgflags") if new_flags is None else new_flags or None
    args = tuple(entry.table_attrs.get("trigger_args") or ()) if new_args is None else new_args
    no_triggers = bool(entry.table_attrs.get("no_triggers"))
    spec = capture.root_spec(flags, args, no_triggers, handler).resolve(conn, entry.table_name)
    # The trigger options as now given replace the stored ones (a flag given empty: none).
    attrs = {k: v for k, v in attrs.items() if k not in ("tgflags", "trigger_args", "capture")}
    if capture.CaptureSpec.from_attrs(entry.table_attrs) == spec:
        return {**attrs, **capture.root_attrs(spec, flags, args)}
    if not spec.no_triggers:
        capture.attach(conn, queue, entry.table_name, deny=False, spec=spec)
        log.info("Table %s: capture triggers made again", entry.table_name)
    capture.log_added(entry.table_name, spec, entry.table_attrs)  # subscribers keep theirs
    return {**attrs, **capture.root_attrs(spec, flags, args)}


def _filters(handler: Handler) -> tuple:
    return (
        handler.row_filter(),
        tuple(sorted(handler.column_exprs().items())),
        tuple(sorted(handler.copy_column_exprs().items())),
    )
