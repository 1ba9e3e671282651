"""Initial copy of newly attached tables and the exact hand-over to replay (design-notes §4).

While the worker copies, it replays nothing, so the copy snapshot C is taken after the last
applied tick: every event committed before C is in the copy and is skipped by replay
(``pg_visible_in_snapshot``), every later one is applied.  Tables attached by one command
(same ``copy_group``) are copied together from one snapshot, at most ``parallel_copies``
of them at once.  The filter stays until an applied tick's snapshot has xmin >= xmax(C):
then no event can be visible in C any more and the table becomes ``ok``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import psycopg
from psycopg import conninfo

from pgferry.apply.routes import Route
from pgferry.errors import TableError
from pgferry.queue import api as queue_api

log = logging.getLogger(__name__)

# A crash during the copy leaves 'in-copy': the table is copied again (copy truncates).
PENDING_STATES = (None, "in-copy")


def pending_group(conn: psycopg.Connection, queue: str, routes: dict[str, Route]) -> list[Route]:
    """The oldest group of tables (one add-table command) waiting for their copy."""
    rows = conn.execute(
        """
        select table_name, copy_group from ferry.table_info
         where queue_name = %s and local and (merge_state is null or merge_state = 'in-copy')
         order by copy_group nulls last, table_name
        """,
        (queue,),
    ).fetchall()
    if not rows:
        return []
    first_group = rows[0][1]
    names = [r[0] for r in rows if r[1] == first_group] if first_group is not None else [rows[0][0]]
    return [routes[n] for n in names if n in routes]


def provider_ready(prov: psycopg.Connection, queue: str, tables: list[str]) -> list[str]:
    """Tables that the provider does not yet hold in state ok (we must wait for those)."""
    rows = prov.execute(
        """
        select t.name from unnest(%s::text[]) as t(name)
         where not exists (select 1 from ferry.table_info i
                            where i.queue_name = %s and i.table_name = t.name
                              and i.local and i.merge_state = 'ok')
        """,
        (tables, queue),
    ).fetchall()
    return [r[0] for r in rows]


def set_state(
    conn: psycopg.Connection,
    queue: str,
    tables: list[str],
    state: str | None,
    snapshot: str | None = None,
) -> None:
    conn.execute(
        """
        update ferry.table_info set merge_state = %s, copy_snapshot = %s::pg_snapshot
         where queue_name = %s and table_name = any(%s)
        """,
        (state, snapshot, queue, tables),
    )


def copy_group(
    *,
    spark_factory: Callable[[], object],
    local: psycopg.Connection,
    provider: psycopg.Connection,
    provider_dsn: str,
    local_dsn: str,
    queue: str,
    group: list[Route],
    max_parallel: int,
) -> bool:
    """Copy one group; False when the provider is not ready yet (nothing changed)."""
    names = [r.table_name for r in group]
    waiting = provider_ready(provider, queue, names)
    provider.rollback()
    if waiting:
        log.info("Table %s not OK on provider, waiting", ", ".join(waiting))
        return False
    from pgferry.pipeline.copy import CopyTask, copy_tables

    with local.transaction():
        set_state(local, queue, names, "in-copy")
    tasks = [
        CopyTask(
            source_table=r.table_name,
            dest_table=r.dest_fq,
            copy_condition=r.copy_condition,
            skip_truncate=r.skip_truncate,
        )
        for r in group
    ]
    log.info("Copying %s", ", ".join(names))
    result = copy_tables(
        spark_factory(),
        provider_dsn,
        replica_dsn(local_dsn),
        tasks,
        max_parallel=max(1, max_parallel),
    )
    snapshot = str(result.snapshot)
    if not snapshot:
        raise TableError(f"copy of {', '.join(names)} returned no snapshot")
    with local.transaction():
        set_state(local, queue, names, "catching-up", snapshot)
    tick_now(provider, queue)
    log.info("Copied %s (%d rows), catching up", ", ".join(names), sum(result.rows.values()))
    return True


def tick_now(provider: psycopg.Connection, queue: str) -> None:
    """A tick on the provider's queue after the copy: the hand-over needs no idle tick.

    The tick is made here when the provider ticks its queue itself: waiting for the
    ticker's next round would add up to ``ticker_period``.  The queue row lock orders it
    with the ticker's own ticks.  Otherwise (a branch mirrors its provider's ticks, a paused
    ticker, no right to tick) the forced tick comes with the next tick the queue gets.
    """
    for step in (queue_api.force_tick, queue_api.tick_if_own_ticker):
        with contextlib.suppress(psycopg.Error), provider.transaction():
            step(provider, queue)


def replica_dsn(dsn: str) -> str:
    """``dsn`` whose sessions run with session_replication_role = replica.

    The copy's own TRUNCATE and COPY must pass the subscriber's deny-write triggers.
    """
    params = conninfo.conninfo_to_dict(dsn)
    opts = str(params.get("options") or "")
    params["options"] = f"{opts} -c session_replication_role=replica".strip()
    return conninfo.make_conninfo(**params)


def promote(conn: psycopg.Connection, queue: str, tick_snapshot: str | None) -> list[str]:
    """Tables whose copy snapshot lies wholly before ``tick_snapshot`` become ok."""
    if tick_snapshot is None:
        return []
    rows = conn.execute(
        """
        update ferry.table_info set merge_state = 'ok', copy_snapshot = null
         where queue_name = %s and local and merge_state = 'catching-up'
           and (copy_snapshot is null
                or pg_snapshot_xmax(copy_snapshot) <= pg_snapshot_xmin(%s::pg_snapshot))
        returning table_name
        """,
        (queue, tick_snapshot),
    ).fetchall()
    return [r[0] for r in rows]
