"""Replay of one batch: read on the provider, collapse per key, stage, apply set-based.

Data path (design-notes §3, §7):

1. The batch is split into parts by a hash of (table, key); each part is one query on the
   provider (:func:`pgferry.replication.eventsql.part_query`) that routes, filters and
   collapses to the last event per key.  All events of a key fall into one part, so the
   collapse is complete inside each part and the Spark job is a single stage (no shuffle).
2. Each Spark task streams its part with COPY from the provider straight into
   ``ferry.replay_stage`` on the subscriber (bytes passed through, never parsed), in its own
   transaction after deleting its own part, so a task run twice cannot double anything.
3. The driver applies the staged rows in ONE transaction (:func:`apply_staged`): TRUNCATE
   barriers, then per table one DELETE ... USING and one INSERT ... ON CONFLICT DO UPDATE,
   then sequences; the caller adds the tick record to the same transaction.

A batch whose estimated size is at most ``local_max_events`` skips Spark: the same queries
run as one part on the driver, streamed into the stage inside the applying transaction.  A
Spark job costs more than such a batch does, and the result is identical.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgferry.db import connect, error_text
from pgferry.errors import DatabaseError, PgferryError
from pgferry.replication.routes import Route

log = logging.getLogger(__name__)

STAGE_COLUMNS = (
    "consumer_name",
    "batch_id",
    "part",
    "ev_id",
    "table_name",
    "op",
    "row_key",
    "row_data",
)


class ReplayError(PgferryError):
    """A batch could not be applied (the message names the table where it is known)."""


@dataclass
class ApplyStats:
    upserts: int = 0
    deletes: int = 0
    truncates: int = 0
    sequences: int = 0
    tables: set[str] = field(default_factory=set)
    spark: bool = False
    apply_seconds: float = 0.0

    def add(self, other: ApplyStats) -> None:
        self.upserts += other.upserts
        self.deletes += other.deletes
        self.truncates += other.truncates
        self.sequences += other.sequences
        self.tables |= other.tables

    @property
    def rows(self) -> int:
        return self.upserts + self.deletes


# --- executor side -----------------------------------------------------------------------

# Bytes gathered before one write to the subscriber: one COPY message per row is slow.
WRITE_CHUNK = 1 << 20


def stream_part(provider: psycopg.Connection, local: psycopg.Connection, query: str) -> int:
    """COPY one part's rows from the provider straight into the stage (bytes untouched)."""
    cols = ", ".join(STAGE_COLUMNS)
    with (
        provider.cursor() as pcur,
        pcur.copy("copy (" + query + ") to stdout") as src,  # type: ignore[arg-type]
        local.cursor() as lcur,
    ):
        with lcur.copy(f"copy ferry.replay_stage ({cols}) from stdin") as dst:  # type: ignore[arg-type]
            buf = bytearray()
            for chunk in src:
                buf += chunk
                if len(buf) >= WRITE_CHUNK:
                    dst.write(bytes(buf))
                    buf.clear()
            if buf:
                dst.write(bytes(buf))
        return max(lcur.rowcount, 0)


def stage_part(provider_dsn: str, local_dsn: str, key: tuple[str, int, int], query: str) -> int:
    """Replace one part's rows in the stage, in one transaction (safe to run twice)."""
    consumer, batch_id, part = key
    try:
        with (
            connect(provider_dsn, autocommit=True, application_name="pgferry-replay") as prov,
            connect(local_dsn, application_name="pgferry-replay") as local,
            local.transaction(),
        ):
            local.execute(
                "delete from ferry.replay_stage"
                " where consumer_name = %s and batch_id = %s and part = %s",
                (consumer, batch_id, part),
            )
            return stream_part(prov, local, query)
    except psycopg.Error as exc:
        raise DatabaseError(f"staging batch {batch_id}: {error_text(exc)}") from None


def _spark_stage(
    spark, provider_dsn: str, local_dsn: str, consumer: str, batch_id: int, queries: Sequence[str]
) -> int:
    """One single-stage Spark job: each task stages one part (no shuffle needed)."""
    work = [((consumer, batch_id, part), q) for part, q in enumerate(queries)]
    sc = spark.sparkContext
    try:
        sc.setJobDescription(f"pgferry replay batch {batch_id}")
        counts = (
            sc.parallelize(work, max(1, len(work)))
            .map(lambda kq: stage_part(provider_dsn, local_dsn, kq[0], kq[1]))
            .collect()
        )
    except Exception as exc:  # noqa: BLE001 - Py4J wraps executor failures
        from pgferry.pipeline.spark import job_error  # pyspark is slow to import: only here

        raise ReplayError(f"batch {batch_id}: {job_error(exc)}") from None
    return int(sum(counts))


# --- driver side -------------------------------------------------------------------------


def clear_stage(conn: psycopg.Connection, consumer: str) -> None:
    conn.execute("delete from ferry.replay_stage where consumer_name = %s", (consumer,))


def stage_batch(
    *,
    spark_factory,
    provider: psycopg.Connection,
    provider_dsn: str,
    local_dsn: str,
    local_conn: psycopg.Connection,
    consumer: str,
    batch_id: int,
    queries: Sequence[str],
    use_spark: bool,
) -> int:
    """Fill the stage for ``batch_id``.

    Spark path: the stage is cleared and committed first, the tasks commit their own parts.
    Driver path: one part, streamed inside ``local_conn``'s open transaction.
    """
    if use_spark:
        with local_conn.transaction():
            clear_stage(local_conn, consumer)
        return _spark_stage(spark_factory(), provider_dsn, local_dsn, consumer, batch_id, queries)
    clear_stage(local_conn, consumer)
    return sum(stream_part(provider, local_conn, q) for q in queries)


def _stage_filter(consumer: str, batch_id: int, table: str, op: str, after: int) -> sql.Composed:
    return sql.SQL(
        "s.consumer_name = {} and s.batch_id = {} and s.table_name = {}"
        " and s.op = {} and s.ev_id > {}"
    ).format(
        sql.Literal(consumer),
        sql.Literal(batch_id),
        sql.Literal(table),
        sql.Literal(op),
        sql.Literal(after),
    )


def apply_staged(
    conn: psycopg.Connection,
    consumer: str,
    batch_id: int,
    routes: dict[str, Route],
    source_columns: dict[str, frozenset[str] | None],
) -> ApplyStats:
    """Apply the staged batch inside the caller's transaction; clears the stage rows."""
    stats = ApplyStats()
    summary = conn.execute(
        """
        select table_name, op, count(*), max(ev_id) from ferry.replay_stage
         where consumer_name = %s and batch_id = %s
         group by table_name, op
        """,
        (consumer, batch_id),
    ).fetchall()
    ops: dict[str, dict[str, tuple[int, int]]] = {}
    for table, op, count, max_ev in summary:
        ops.setdefault(table, {})[op] = (count, max_ev)

    # Barriers first: what a TRUNCATE erased is dropped by the ev_id > barrier filter below.
    barrier = {t: o["R"][1] for t, o in ops.items() if "R" in o and t in routes}
    truncate = [routes[t] for t in sorted(barrier) if not routes[t].skip_truncate]
    if truncate:
        conn.execute(
            sql.SQL("truncate only {}").format(sql.SQL(", ").join(r.dest for r in truncate))
        )
        stats.truncates = len(truncate)

    for table, table_ops in sorted(ops.items()):
        route = routes.get(table)
        if route is None:
            continue
        after = barrier.get(table, 0)
        try:
            if "D" in table_ops:
                stats.deletes += _delete(
                    conn, route, _stage_filter(consumer, batch_id, table, "D", after)
                )
            if "U" in table_ops:
                cols = _apply_columns(route, source_columns.get(table))
                stats.upserts += _upsert(
                    conn, route, cols, _stage_filter(consumer, batch_id, table, "U", after)
                )
        except psycopg.Error as exc:
            raise ReplayError(f"applying to {route.dest_text}: {error_text(exc)}") from None
        stats.tables.add(table)

    seq_rows = conn.execute(
        """
        select s.table_name, max(s.row_data::bigint) from ferry.replay_stage s
         where s.consumer_name = %s and s.batch_id = %s and s.op = 'S'
         group by s.table_name
        """,
        (consumer, batch_id),
    ).fetchall()
    for seq_name, value in seq_rows:
        conn.execute("select ferry.seq_advance(%s::regclass, %s)", (seq_name, value))
        conn.execute(
            """
            update ferry.seq_info set last_value = greatest(coalesce(last_value, %s), %s)
             where seq_name = %s and local
            """,
            (value, value, seq_name),
        )
        stats.sequences += 1
    clear_stage(conn, consumer)
    return stats


def _apply_columns(route: Route, src: frozenset[str] | None) -> tuple[str, ...]:
    """Local columns that the source also has (a column only on one side keeps its own)."""
    if src is None:
        return route.columns
    return tuple(c for c in route.columns if c in src or c in route.pk)


def _delete(conn: psycopg.Connection, route: Route, where: sql.Composed) -> int:
    pk = [sql.Identifier(c) for c in route.pk]
    stmt = sql.SQL(
        "delete from {dest} as t using ("
        " select {rpk} from ferry.replay_stage s"
        " cross join lateral json_populate_record(null::{dest}, s.row_data::json) as r"
        " where {where}) as d"
        " where ({tpk}) = ({dpk})"
    ).format(
        dest=route.dest,
        rpk=sql.SQL(", ").join(sql.SQL("r.{}").format(c) for c in pk),
        where=where,
        tpk=sql.SQL(", ").join(sql.SQL("t.{}").format(c) for c in pk),
        dpk=sql.SQL(", ").join(sql.SQL("d.{}").format(c) for c in pk),
    )
    return conn.execute(stmt).rowcount


def _upsert(
    conn: psycopg.Connection, route: Route, cols: tuple[str, ...], where: sql.Composed
) -> int:
    idents = [sql.Identifier(c) for c in cols]
    rest = [sql.Identifier(c) for c in cols if c not in route.pk]
    if rest:
        action = sql.SQL("do update set {}").format(
            sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(c) for c in rest)
        )
    else:
        action = sql.SQL("do nothing")
    stmt = sql.SQL(
        "insert into {dest} as t ({cols}) overriding system value"
        " select {rcols} from ferry.replay_stage s"
        " cross join lateral json_populate_record(null::{dest}, s.row_data::json) as r"
        " where {where}"
        " on conflict ({pk}) {action}"
    ).format(
        dest=route.dest,
        cols=sql.SQL(", ").join(idents),
        rcols=sql.SQL(", ").join(sql.SQL("r.{}").format(c) for c in idents),
        where=where,
        pk=sql.SQL(", ").join(sql.Identifier(c) for c in route.pk),
        action=action,
    )
    return conn.execute(stmt).rowcount
