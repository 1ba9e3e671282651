"""Which tables a node's ``compare`` and ``repair`` take, and as which task.

Tables come from this node's registry (its routes) with their destination names and copy
conditions (the condition filters the source side only: the subscriber's table holds just
the matching rows): :func:`node_tasks`.  A table a lake leaf keeps in a lake (handler
``lake``) is taken out of them as a :class:`~.lake_spark.LakeCompareTask`, its local table
being only the shape (:func:`split_lakes`).  ``repair --repair-where`` narrows both sides
(:func:`narrowed`), and at the sync point a table either node lost without
``remove-table`` is set aside with one line (:func:`present`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TypeVar

import psycopg

from pgferry import expressions
from pgferry.config import Config
from pgferry.db import connection
from pgferry.errors import TableError
from pgferry.handlers import registry as handler_registry
from pgferry.handlers.api import HandlerContext
from pgferry.handlers.lake import Lake
from pgferry.lake import types as lake_types
from pgferry.node import merge
from pgferry.node.connect import local_connstr, queue_name
from pgferry.node.model import require_node
from pgferry.registry import entries
from pgferry.registry.names import parse_pattern, split_qualified
from pgferry.registry.routes import load_routes
from pgferry.sync.buckets import CompareTask
from pgferry.sync.lake_spark import LakeCompareTask
from pgferry.sync.point import SyncPoint

log = logging.getLogger(__name__)

# A task of either kind: both name the provider's table and the node's.
Task = TypeVar("Task", CompareTask, LakeCompareTask)


def node_tasks(config: Config, names: Sequence[str]) -> list[CompareTask]:
    """The tables ``names`` (patterns; every table of the node when empty) as compare
    tasks; TableError with one line when one is unknown, merged from several partitions or
    not in sync yet, or when a registered table is gone from this node's database."""
    with connection(local_connstr(config)) as conn:
        try:
            routes = load_routes(conn, queue_name(config), handler_registry.context(config))
        except TableError:
            conn.rollback()
            _gone_here(conn, queue_name(config))
            raise
        merged = merge.merged_tables(conn, queue_name(config))
    routes = {t: r for t, r in routes.items() if r.handler.needs_table}  # holding rows here
    chosen = [t for t in routes if t not in merged]
    if names:
        patterns = [parse_pattern(n) for n in names]
        chosen = [t for t in routes if any(p.select([split_qualified(t)]) for p in patterns)]
        if not chosen:
            raise TableError(f"Table not found: {', '.join(names)}")
        if merged.intersection(chosen):
            # The table holds the other parts' rows too: repair would delete them.
            raise TableError(
                f"Table {', '.join(sorted(merged.intersection(chosen)))} is merged from"
                " several partitions: compare and repair take one source only"
            )
    elif merged:
        log.info("Merged tables left out: %s", ", ".join(sorted(merged)))
    if not chosen:
        raise TableError("no tables registered on this node")
    not_ok = [t for t in chosen if routes[t].merge_state != "ok"]
    if not_ok:
        raise TableError(f"Table not in sync yet: {', '.join(not_ok)}")
    return [
        CompareTask(
            source_table=t,
            dest_table=routes[t].dest_fq,
            copy_condition=routes[t].source_filter,
            key=routes[t].pk,
            exclude_columns=routes[t].ignored,
        )
        for t in chosen
    ]


def _gone_here(conn: psycopg.Connection, queue: str) -> None:
    """Fail with one line if registered tables are gone from this node's database (dropped
    without ``remove-table``): replay stops at them too, so no sync point can be taken."""
    own = HandlerContext()  # only whether each handler keeps a table counts
    gone = [
        e.dest_name
        for e in entries.without_destination(conn, queue)
        if handler_registry.from_attrs(e.table_attrs or {}, own).needs_table
    ]
    if gone:
        node = require_node(conn, queue).node_name
        raise TableError(
            f"table {', '.join(gone)} does not exist on node {node}: remove-table it or add it"
            " back (replay stops at it too)"
        )


def split_lakes(
    config: Config, tasks: Sequence[CompareTask]
) -> tuple[list[CompareTask], list[LakeCompareTask]]:
    """(the other tasks, the lake tables' LakeCompareTasks)."""
    with connection(local_connstr(config)) as conn:
        routes = load_routes(conn, queue_name(config), handler_registry.context(config))
        lakes = {r.dest_fq: r for r in routes.values() if isinstance(r.handler, Lake)}
        if not lakes:
            return list(tasks), []
        plain, lake = [], []
        for task in tasks:
            route = lakes.get(task.dest_table)
            if route is None:
                plain.append(task)
                continue
            assert isinstance(route.handler, Lake)
            columns = lake_types.table_columns(conn, route.dest_fq, route.columns)
            schema, name = split_qualified(route.table_name)
            lake.append(
                LakeCompareTask(route.table_name, schema, name, route.dest_fq,
                                route.handler.spec(), columns, route.source_filter,
                                 () if route.keyless else route.pk)
            )  # fmt: skip
    return plain, lake


def narrowed(config: Config, tasks: Sequence[CompareTask], where: str) -> list[CompareTask]:
    """The tasks with ``where`` added to both sides' conditions, checked first on this
    node's tables as one read-only boolean expression (one line and nothing read if not)."""
    where = expressions.boolean_expression(where, "--repair-where")
    with connection(local_connstr(config), autocommit=True) as conn:
        for task in tasks:
            schema, name = split_qualified(task.dest_table)
            expressions.check_on_table(conn, schema, name, where, "--repair-where")
    return [
        dataclasses.replace(
            t,
            copy_condition=expressions.conjunction(t.copy_condition, where),
            dest_condition=expressions.conjunction(t.dest_condition, where),
        )
        for t in tasks
    ]


def present(config: Config, point: SyncPoint, tasks: list[Task]) -> tuple[list[Task], list[str]]:
    """The tasks whose table both nodes have, and a line for each of the others: a table
    dropped on either node without ``remove-table`` cannot be compared, the others can."""
    if not tasks:
        return [], []
    # One node at a time: an error is then named after the database it came from.
    with connection(point.provider_dsn, autocommit=True) as provider:
        at_provider = [_exists(provider, t.source_table) for t in tasks]
    kept: list[Task] = []
    lines: list[str] = []
    with connection(point.local_dsn, autocommit=True) as local:
        node = require_node(local, queue_name(config))
        for task, found in zip(tasks, at_provider, strict=True):
            if not found:
                name, where = task.source_table, node.provider_node
            elif not _exists(local, task.dest_table):
                name, where = task.dest_table, node.node_name
            else:
                kept.append(task)
                continue
            lines.append(
                f"{task.dest_table}: table {name} does not exist on node {where}:"
                " remove-table it or add it back"
            )
    return kept, lines


def _exists(conn: psycopg.Connection, table: str) -> bool:
    row = conn.execute("select to_regclass(%s) is not null", (table,)).fetchone()
    return bool(row and row[0])
