"""Repair's differing rows found on the driver, for reads too small to be worth a Spark job.

:mod:`.repair` calls :func:`local_differences` when :func:`small_read` says so: both tables are
small (as compare's driver path decides), or the key ranges compare found hold few rows.  It
reads the same ranges with the same query as the Spark tasks (:func:`read_query`, values as
PostgreSQL prints them, through COPY), joins the two sides in a dict per range and returns
the differences in the form the Spark join gives, so the fix SQL is the same either way.
Nothing here imports PySpark or pyarrow: a small repair starts no JVM.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgferry.db import error_text
from pgferry.errors import DatabaseError
from pgferry.pipeline import compare
from pgferry.pipeline.buckets import SESSION_SQL, TablePlan
from pgferry.pipeline.keyranges import BUCKET_ROWS, KeyRange
from pgferry.pipeline.snapshot import open_in_snapshot

# Tables within compare's LOCAL_PAGES are read whole on the driver; larger ones when at
# most this many rows (estimated, per side) inside the differing key ranges.
LOCAL_ROWS = 200_000


def ordered_columns(plan: TablePlan) -> list[str]:
    """Key columns first, then the rest: the join reads keys at fixed positions."""
    return list(plan.key.names) + [c for c in plan.columns if c not in plan.key.names]


def read_query(plan: TablePlan, side: int, rng: KeyRange) -> sql.Composable:
    """The rows of one side inside ``rng``, key columns first."""
    target = plan.src if side == 0 else plan.dst
    where = [plan.key.predicate(rng)]
    if target.condition:
        from pgferry import expressions  # pglast: only for a condition

        where.append(expressions.as_sql(target.condition))
    return sql.SQL("select {} from {} where {}").format(
        sql.SQL(", ").join(map(sql.Identifier, ordered_columns(plan))),
        target.relation,
        sql.SQL(" and ").join(where),
    )


def small_read(prepared, work: list[tuple[int, KeyRange]]) -> bool:
    """Whether the ranges to read are few enough rows to join on the driver."""
    if all(
        max(src.pages, dst.pages) <= compare.LOCAL_PAGES
        for src, dst in zip(prepared.sources, prepared.dests, strict=True)
    ):
        return True
    rows = 0
    for table_no, rng in work:
        bounds = prepared.boundaries[table_no]
        where = {key: i for i, key in enumerate(bounds)}
        # Compare's ranges start and end on bucket boundaries: count the buckets spanned.
        first = 0 if rng.lower is None else where.get(rng.lower, -1) + 1
        last = len(bounds) if rng.upper is None else where.get(rng.upper, -1)
        if (first == 0 and rng.lower is not None) or last < 0:
            return False  # a range of another origin: no estimate
        table_rows = max(prepared.sources[table_no].est_rows, prepared.dests[table_no].est_rows)
        per_bucket = table_rows / (len(bounds) + 1) if table_rows > 0 else BUCKET_ROWS
        rows += int((last - first + 1) * per_bucket)
        if rows > LOCAL_ROWS:
            return False
    return True


def local_differences(job, tables: int) -> list[list[tuple]]:
    """Per table: (key, kind, src values, dst values) of every differing row, as repair's
    Spark join returns them (``job`` is repair's read job)."""
    out: list[list[tuple]] = [[] for _ in range(tables)]
    if not job.ranges:
        return out
    conns: list[psycopg.Connection] = []
    try:
        for connstr, snapshot in zip(job.connstrs, job.snapshots, strict=True):
            conns.append(open_in_snapshot(connstr, snapshot))
            conns[-1].execute(SESSION_SQL)
        for table_no, rng in job.ranges:
            plan = job.plans[table_no]
            src, dst = (_read(conn, plan, side, rng) for side, conn in enumerate(conns))
            out[table_no] += _differ(src, dst, len(ordered_columns(plan)))
    except psycopg.Error as exc:
        raise DatabaseError(f"repair read: {error_text(exc)}") from None
    finally:
        for conn in conns:
            conn.close()
    return out


def _read(conn: psycopg.Connection, plan: TablePlan, side: int, rng: KeyRange) -> dict:
    """Join key -> row (all values text, as the Spark tasks read them)."""
    width = len(ordered_columns(plan))
    nkey = len(plan.key.names)
    query = sql.SQL("copy ({}) to stdout").format(read_query(plan, side, rng))
    rows = {}
    with conn.cursor() as cur, cur.copy(query) as copy:
        copy.set_types(["text"] * width)
        for row in copy.rows():
            # The Spark path's join key: key texts joined by NUL (never in PostgreSQL text).
            rows[row[0] if nkey == 1 else "\x00".join(row[:nkey])] = list(row)
    return rows


def _differ(src: dict, dst: dict, width: int) -> list[tuple]:
    absent = [None] * width
    out = [
        (k, "insert", row, absent) if k not in dst else (k, "update", row, dst[k])
        for k, row in src.items()
        if dst.get(k) != row
    ]
    out += [(k, "delete", absent, row) for k, row in dst.items() if k not in src]
    return out
