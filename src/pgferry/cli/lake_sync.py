"""``compare`` and ``repair`` of the tables a lake leaf keeps in a lake (handler ``lake``).

:func:`split` takes them out of the compare's or repair's tasks (their local table is only
the shape), :func:`compare` compares them at the sync point's tick with
:mod:`pgferry.sync.lake_compare`, :func:`repair` finds their differing rows there and
(``--apply``) writes each table's fix as one lake commit (:mod:`pgferry.sync.lake_repair`);
both use Spark for tables too large for the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pgferry.config import Config


def split(config: Config, tasks: Sequence) -> tuple[list, list]:
    """(the other tasks, the lake tables' LakeCompareTasks)."""
    from pgferry.db import connection
    from pgferry.handlers import registry as handler_registry
    from pgferry.handlers.lake import Lake
    from pgferry.lake import types as lake_types
    from pgferry.node.connect import local_connstr, queue_name
    from pgferry.registry.names import split_qualified
    from pgferry.registry.routes import load_routes
    from pgferry.sync.lake_compare import LakeCompareTask

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


def compare(point, tasks: Sequence, spark: Callable[[], object] | None = None) -> list:
    """The lake tables compared at the sync point; ``spark`` returns the session, called
    only for tables too large for the driver."""
    from pgferry.sync.lake_compare import compare_lake

    if not tasks:
        return []
    return compare_lake(point.provider_dsn, point.src_snapshot, point.tick_id, tasks, spark)


def repair(point, tasks: Sequence, apply: bool, spark: Callable[[], object] | None = None) -> list:
    """The lake tables' differences at the sync point; with ``apply`` one commit each.
    ``spark`` returns the session, called only for tables too large for the driver."""
    from pgferry.sync.lake_repair import repair_lake

    if not tasks:
        return []
    return repair_lake(point.provider_dsn, point.src_snapshot, point.tick_id, tasks, apply, spark)
