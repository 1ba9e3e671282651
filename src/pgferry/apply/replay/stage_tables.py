"""The temporary stage tables of an applying connection: one per destination table and
column set (and one per range of a table whose ranges are merged on the subscriber), and
one for the events of every table whose handler takes events.

A batch's rows reach the subscriber as COPY data of the provider's read, loaded unchanged
into a stage with the destination's column types (:func:`load_stage`); the table's handler
then applies the stage set-based (:mod:`.one_connection`).  The ranges of a table
read apart are merged into its stage by one statement (:func:`merge_ranges`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql

from pgferry.apply.replay.read import copy_options
from pgferry.events import EVENT_COLUMNS
from pgferry.registry.routes import Route


class StageTables:
    """Temporary stage tables of the applying connection, one per (table, columns), and
    one for the events of every table whose handler takes events.

    A stage has the destination's column types (created from it), so COPY parses each
    value once.  The cache belongs to one connection: :meth:`reset` when it changes or when
    a destination's shape may have changed (a replayed script).

    Stages are ``ON COMMIT DELETE ROWS``: the commit empties them in place, without a
    TRUNCATE statement (a round trip, a new file and a catalog write per table and batch).
    A stage loaded again in the same transaction (a later segment or part) is emptied
    first; :meth:`new_transaction` says when one begins.
    """

    def __init__(self) -> None:
        self._conn_id: int | None = None
        self._names: dict[tuple[str, tuple[str, ...], tuple[str, ...]], sql.Identifier] = {}
        self._loaded: set[tuple[Any, ...]] = set()  # keys of the stages loaded in this transaction

    def reset(self) -> None:
        self._names.clear()
        self._loaded.clear()

    def new_transaction(self) -> None:
        """The applying transaction begins: every stage is empty (emptied at commit, or
        rolled back together with its rows)."""
        self._loaded.clear()

    def get(
        self,
        conn: psycopg.Connection,
        route: Route,
        columns: tuple[str, ...],
        *,
        events: bool = False,
        part: int | None = None,
    ) -> sql.Composable:
        """The stage of ``route``'s ``columns`` (emptied if loaded before in this
        transaction); ``part``: the stage of one range of a table merged on the subscriber."""
        if self._conn_id != id(conn):
            self._conn_id, self._names, self._loaded = id(conn), {}, set()
        key: tuple[Any, ...] = ("", (), ()) if events else (route.dest_fq, columns, route.types)
        if part is not None:
            key = (*key, part)
        name = self._names.get(key)
        if name is not None and key in self._loaded:
            conn.execute(sql.SQL("truncate pg_temp.{}").format(name))
        if name is None:
            name = sql.Identifier(f"ferry_stage_{len(self._names) + 1}")
            conn.execute(sql.SQL("drop table if exists pg_temp.{}").format(name))
            if events:
                create = sql.SQL("create temp table {name} ({cols}) on commit delete rows").format(
                    name=name,
                    cols=sql.SQL(", ").join(
                        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t))
                        for c, t in EVENT_COLUMNS
                    ),
                )
            else:
                create = sql.SQL(
                    "create temp table {name} on commit delete rows"
                    " as select ''::\"char\" as op, {cols} from {dest} with no data"
                ).format(
                    name=name,
                    cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
                    dest=route.dest,
                )
            conn.execute(create)
            self._names[key] = name
        self._loaded.add(key)
        return sql.SQL("pg_temp.{}").format(name)


def load_stage(
    conn: psycopg.Connection, stage: sql.Composable, chunks: Iterable[bytes], binary: bool
) -> int:
    stmt = sql.SQL("copy {} from stdin" + copy_options(binary)).format(stage)
    with conn.cursor() as cur:
        with cur.copy(stmt) as dst:
            for chunk in chunks:
                dst.write(chunk)
        return max(cur.rowcount, 0)


def merge_ranges(
    route: Route, columns: tuple[str, ...], into: sql.Composable, ranges: list[sql.Composable]
) -> sql.Composed:
    """INSERT into ``into`` of each key's row from the latest of ``ranges`` (stages)."""
    order = "ferry_range"
    while order in columns:  # the range's number must not shadow a column
        order += "_"
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in ("op", *columns))
    ranges_sql = sql.SQL(" union all ").join(
        sql.SQL("select {n} as {order}, {cols} from {stage}").format(
            n=sql.Literal(n), order=sql.Identifier(order), cols=cols, stage=stage
        )
        for n, stage in enumerate(ranges)
    )
    pk = sql.SQL(", ").join(sql.Identifier(c) for c in route.pk)
    return sql.SQL(
        "insert into {into} ({cols}) select distinct on ({pk}) {cols} from ({ranges}) m"
        " order by {pk}, {order} desc"
    ).format(into=into, cols=cols, pk=pk, ranges=ranges_sql, order=sql.Identifier(order))
