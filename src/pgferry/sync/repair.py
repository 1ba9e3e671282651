"""Repair: find the exact rows that differ and write (optionally apply) SQL that fixes them.

:func:`repair_tables` runs on the driver: it prepares the tables (:mod:`.buckets`), builds the
two DataFrames, collects the differing rows of the join and writes and applies the fix.  The
executors run ``_read_batches`` (with ``_read_range`` and ``_key_column``) inside
``mapInArrow``: each call receives the read job (connection strings, snapshot ids, each
table's plan, the key ranges to read), which Spark pickles, so it holds plain values only.

Both sides are read at one logical point each (the caller's snapshots or exported ones), only
inside the given key ranges when compare found some, as all-text columns: each Spark task
runs ``COPY (...) TO STDOUT (FORMAT csv)`` and parses it with pyarrow into Arrow batches
(``mapInArrow``).  Spark then full-outer-joins the sides on the primary key and keeps rows
that are missing, extra or changed; values are compared as PostgreSQL prints them, NULL-aware.
The fix is INSERT / UPDATE / DELETE with quoted literals, in a file, and with ``apply`` run on
the destination in ONE transaction with ``session_replication_role = replica``.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError, PgferryError
from pgferry.pipeline.keyranges import KeyRange
from pgferry.pipeline.snapshot import maybe_snapshot, open_in_snapshot
from pgferry.pipeline.spark_errors import job_error
from pgferry.private_files import open_private
from pgferry.sync.buckets import (
    SESSION_SQL,
    CompareTask,
    Prepared,
    TablePlan,
    bucket_groups,
    prepare,
)
from pgferry.sync.repair_local import (
    Difference,
    ReadJob,
    local_differences,
    ordered_columns,
    read_query,
    small_read,
)
from pgferry.sync.spark_tasks import describe_job, functions, parallelism

if TYPE_CHECKING:  # PySpark and Arrow: loaded where a job runs
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from pgferry.sync.spark_tasks import Spark

log = logging.getLogger(__name__)

# A whole-table read is split into ranges of about 200k rows (one Arrow table each).
READ_GROUP_BUCKETS = 400
# Statements sent to the server per round trip when applying.
APPLY_CHUNK = 500


@dataclass
class RepairResult:
    source_table: str
    dest_table: str
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    sql_path: Path | None = None
    applied: bool = False

    @property
    def changes(self) -> int:
        return self.inserts + self.updates + self.deletes

    def line(self) -> str:
        state = "applied" if self.applied else f"written to {self.sql_path}"
        return (
            f"{self.dest_table}: missed {self.inserts} inserts, {self.updates} updates, "
            f"{self.deletes} deletes ({state})"
        )


# What find_differences answers: the prepared tables and, per table, its differing rows.
Differences = tuple[Prepared, list[list[Difference]]]


def repair_tables(
    spark: Spark,
    src_connstr: str,
    dst_connstr: str,
    tasks: list[CompareTask],
    *,
    fix_dir: Path,
    apply: bool,
    src_snapshot: str | None = None,
    dst_snapshot: str | None = None,
    ranges: Mapping[str, Sequence[KeyRange]] | None = None,
    fix_file: Path | None = None,
    threads: int = 0,
    found: Differences | None = None,
) -> list[RepairResult]:
    """Find and fix differences; ``ranges`` (per dest_table) limits where to look.

    Few rows to read (``repair_local.LOCAL_ROWS``; ``LOCAL_MODE_ROWS`` when ``threads``,
    compare's :func:`~.compare.driver_threads`, says Spark would run in local mode) are
    joined on the driver, both sides read at once; more by a Spark job. ``found``:
    :func:`find_differences`' answer for these tasks, when the caller has it already.

    The fix for each table goes to ``fix_dir/fix.<dest_table>.sql`` (or ``fix_file`` when
    there is exactly one table).
    """
    if not tasks:
        raise PgferryError("repair: no tables given")
    if fix_file is not None and len(tasks) != 1:
        raise PgferryError("repair: fix_file needs exactly one table")
    prepared, diffs = found or find_differences(
        spark, src_connstr, dst_connstr, tasks, src_snapshot=src_snapshot,
        dst_snapshot=dst_snapshot, ranges=ranges, threads=threads,
    )  # fmt: skip
    results = []
    fix_dir.mkdir(parents=True, exist_ok=True)
    with connect(dst_connstr, autocommit=True) as conn:
        for table_no, task in enumerate(tasks):
            dest = prepared.dests[table_no]
            result = RepairResult(task.source_table, task.dest_table)
            plan = prepared.plans[table_no]
            statements = _fix_sql(conn, dest.ident, plan, diffs[table_no], result)
            result.sql_path = fix_file or fix_dir / f"fix.{_file_safe(dest.display)}.sql"
            _write_fix(result.sql_path, dest.display, statements)
            if apply and statements:
                _apply(dst_connstr, conn, statements)
                result.applied = True
            log.info("repair %s", result.line())
            results.append(result)
    return results


def find_differences(
    spark: Spark,
    src_connstr: str,
    dst_connstr: str,
    tasks: list[CompareTask],
    *,
    src_snapshot: str | None = None,
    dst_snapshot: str | None = None,
    ranges: Mapping[str, Sequence[KeyRange]] | None = None,
    threads: int = 0,
) -> Differences:
    """The prepared tables and, per table, every differing row as (join key, kind, source
    values, destination values), kind ``insert`` (only in the source), ``delete`` (only in
    the destination) or ``update``; values as PostgreSQL prints them, key columns first
    (:func:`~.repair_local.ordered_columns`).  ``ranges`` (per dest_table) limits where to
    look; few rows are joined on the driver (more of them when ``threads`` says Spark would
    run in local mode), more by a Spark job."""
    with (
        maybe_snapshot(src_connstr, src_snapshot) as src_snap,
        maybe_snapshot(dst_connstr, dst_snapshot) as dst_snap,
    ):
        # Key boundaries only for tables read whole: compare's ranges need none.
        whole_read = ranges is None or any(t.dest_table not in ranges for t in tasks)
        prepared = prepare(src_connstr, dst_connstr, tasks, src_snap, sample=whole_read)
        for task, plan in zip(tasks, prepared.plans, strict=True):
            if not plan.key.names:
                raise PgferryError(
                    f"repair: {task.dest_table} has no key, rows cannot be matched one by"
                    " one (compare it; resync it to repair)"
                )
        work: list[tuple[int, KeyRange]] = []
        whole: set[int] = set()
        groups = bucket_groups(prepared.boundaries, READ_GROUP_BUCKETS)
        for table_no, task in enumerate(tasks):
            if ranges is not None and task.dest_table in ranges:
                work += [(table_no, r) for r in ranges[task.dest_table]]
            else:
                whole.add(table_no)
                work += [
                    (g.table_no, KeyRange(g.lower, g.upper))
                    for g in groups
                    if g.table_no == table_no
                ]
        job = ReadJob(
            (src_connstr, dst_connstr),
            (src_snap, dst_snap),
            tuple(prepared.plans),
            tuple(work),
            frozenset(whole),
        )
        try:
            if small_read(prepared, work, src_connstr, threads > 0):
                # Few rows to read: joined here, as starting Spark would cost more.
                diffs = local_differences(job, len(tasks))
            else:
                diffs = _find_differences(spark() if callable(spark) else spark, job, len(tasks))
        except PgferryError:
            raise
        except Exception as exc:
            raise DatabaseError(f"repair failed: {job_error(exc)}") from None
    return prepared, diffs


def _file_safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "table"


def _find_differences(spark: SparkSession, job: ReadJob, tables: int) -> list[list[Difference]]:
    """Per table: (kind, src values, dst values) of every differing row."""
    F = functions(spark)  # noqa: N806 - PySpark's own name for the module

    out: list[list[Difference]] = [[] for _ in range(tables)]
    if not job.ranges:
        return out
    width = max(len(p.columns) for p in job.plans)
    sides = [_side_frame(spark, job, side, width) for side in (0, 1)]
    src, dst = sides[0].alias("s"), sides[1].alias("d")
    cond = (F.col("s.t") == F.col("d.t")) & (F.col("s.k") == F.col("d.k"))
    joined = src.join(dst, cond, "full_outer")
    missing = F.col("d.t").isNull()
    extra = F.col("s.t").isNull()
    changed = F.lit(False)
    for i in range(width):
        changed = changed | ~F.col(f"s.c{i}").eqNullSafe(F.col(f"d.c{i}"))
    kind = F.when(missing, F.lit("insert")).when(extra, F.lit("delete")).otherwise(F.lit("update"))
    picked = joined.where(missing | extra | changed).select(
        F.coalesce(F.col("s.t"), F.col("d.t")).alias("t"),
        F.coalesce(F.col("s.k"), F.col("d.k")).alias("k"),
        kind.alias("kind"),
        F.array(*[F.col(f"s.c{i}") for i in range(width)]).alias("src"),
        F.array(*[F.col(f"d.c{i}") for i in range(width)]).alias("dst"),
    )
    describe_job(spark, "pgferry repair")
    for row in picked.collect():
        out[row["t"]].append((row["k"], row["kind"], list(row["src"]), list(row["dst"])))
    return out


def _side_frame(spark: SparkSession, job: ReadJob, side: int, width: int) -> DataFrame:
    """DataFrame of one side's rows in ``job.ranges``: t, k, c0..c<width-1> (all text)."""
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    schema = StructType(
        [StructField("t", IntegerType(), False), StructField("k", StringType(), False)]
        + [StructField(f"c{i}", StringType(), True) for i in range(width)]
    )
    # One task per slot, each reading every slices-th range (on Spark Connect too: no RDD).
    slices = max(1, min(len(job.ranges), parallelism(spark)))
    ranges = spark.range(0, slices, 1, slices)
    return ranges.mapInArrow(
        lambda batches: _read_batches(job, side, batches, width, slices), schema
    )


def read_table_count(spark: SparkSession, connstr: str, task: CompareTask) -> int:
    """Read one table whole into Spark the way repair does, and count it (data-path probe)."""
    with maybe_snapshot(connstr, None) as snap:
        prepared = prepare(connstr, connstr, [task], snap)
        groups = bucket_groups(prepared.boundaries, READ_GROUP_BUCKETS)
        ranges = tuple((0, KeyRange(g.lower, g.upper)) for g in groups)
        job = ReadJob((connstr, connstr), (snap, snap), tuple(prepared.plans), ranges)
        width = len(prepared.plans[0].columns)
        rows: int = _side_frame(spark, job, 0, width).count()
        return rows


def _read_batches(
    job: ReadJob, side: int, batches: Iterator[pa.RecordBatch], width: int, slices: int
) -> Iterator[pa.RecordBatch]:
    """Executor side: for each slice number, COPY its ranges of ``side`` out as Arrow
    batches (slice s reads ranges s, s + slices, ...)."""
    import pyarrow as pa

    conn: psycopg.Connection | None = None  # one side per task: one connection, when needed
    try:
        for batch in batches:
            numbers = [
                r for s in batch.column("id").to_pylist() for r in range(s, len(job.ranges), slices)
            ]
            for range_no in numbers:
                if conn is None:
                    conn = open_in_snapshot(job.connstrs[side], job.snapshots[side])
                    conn.execute(SESSION_SQL)
                table_no, rng = job.ranges[range_no]
                plan = job.plans[table_no]
                table = _read_range(conn, plan, side, rng, width)
                if table.num_rows:
                    table = table.add_column(0, "k", _key_column(table, len(plan.key.names)))
                    table = table.add_column(
                        0, "t", pa.array([table_no] * table.num_rows, pa.int32())
                    )
                    yield from table.to_batches()
    except psycopg.Error as exc:
        raise DatabaseError(f"repair read: {error_text(exc)}") from None
    finally:
        if conn is not None:
            conn.close()


def _key_column(table: pa.Table, nkey: int) -> pa.Array:
    """One join key per row: key texts joined by NUL, which PostgreSQL text never contains."""
    import pyarrow.compute as pc

    if nkey == 1:
        return table.column("c0")
    return pc.binary_join_element_wise(*[table.column(f"c{i}") for i in range(nkey)], "\x00")


def _read_range(
    conn: psycopg.Connection, plan: TablePlan, side: int, rng: KeyRange, width: int
) -> pa.Table:
    import pyarrow as pa
    from pyarrow import csv

    names = ordered_columns(plan)
    query = sql.SQL("copy ({}) to stdout (format csv)").format(read_query(plan, side, rng))
    buf = io.BytesIO()
    with conn.cursor() as cur, cur.copy(query) as copy:
        for data in copy:
            buf.write(data)
    cols = [f"c{i}" for i in range(width)]
    if buf.tell() == 0:
        return pa.table({c: pa.array([], pa.string()) for c in cols})
    buf.seek(0)
    table = csv.read_csv(
        buf,
        read_options=csv.ReadOptions(column_names=cols[: len(names)]),
        parse_options=csv.ParseOptions(newlines_in_values=True),
        convert_options=csv.ConvertOptions(
            column_types={c: pa.string() for c in cols[: len(names)]},
            # PostgreSQL's CSV: NULL is an unquoted empty field, '' is a quoted one.
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )
    for c in cols[len(names) :]:
        table = table.append_column(c, pa.nulls(table.num_rows, pa.string()))
    return table


def _fix_sql(
    conn: psycopg.Connection,
    dest: sql.Identifier,
    plan: TablePlan,
    diffs: list[Difference],
    result: RepairResult,
) -> list[str]:
    names = ordered_columns(plan)
    nkey = len(plan.key.names)
    dest_rel = plan.dst.relation
    deletes: list[str] = []
    updates: list[str] = []
    inserts: list[str] = []

    def key_match(values: Sequence[str | None]) -> sql.Composable:
        return sql.SQL(" and ").join(
            sql.SQL("{} = {}").format(sql.Identifier(n), sql.Literal(v))
            for n, v in zip(names[:nkey], values[:nkey], strict=True)
        )

    for _key, kind, src, dst in sorted(diffs, key=lambda d: d[0]):
        if kind == "delete":
            stmt = sql.SQL("delete from {} where {};").format(dest_rel, key_match(dst))
            deletes.append(stmt.as_string(conn))
        elif kind == "insert":
            stmt = sql.SQL("insert into {} ({}) values ({});").format(
                dest,
                sql.SQL(", ").join(map(sql.Identifier, names)),
                sql.SQL(", ").join(sql.Literal(v) for v in src[: len(names)]),
            )
            inserts.append(stmt.as_string(conn))
        else:
            changed = [
                sql.SQL("{} = {}").format(sql.Identifier(n), sql.Literal(src[i]))
                for i, n in enumerate(names)
                if i >= nkey and src[i] != dst[i]
            ]
            stmt = sql.SQL("update {} set {} where {};").format(
                dest_rel, sql.SQL(", ").join(changed), key_match(src)
            )
            updates.append(stmt.as_string(conn))
    result.inserts, result.updates, result.deletes = len(inserts), len(updates), len(deletes)
    # Deletes first, inserts last: a row re-keyed on the source never collides with itself.
    return deletes + updates + inserts


def _write_fix(path: Path, table: str, statements: list[str]) -> None:
    with open_private(path) as fh:  # row data: for the owner only (0600)
        fh.write(f"-- pgferry repair of {table}: {len(statements)} statements\n")
        fh.write("begin;\nset local session_replication_role = replica;\n")
        for stmt in statements:
            fh.write(stmt + "\n")
        fh.write("commit;\n")


def _apply(dst_connstr: str, conn: psycopg.Connection, statements: list[str]) -> None:
    try:
        with conn.transaction():
            conn.execute("set local session_replication_role = replica")
            for i in range(0, len(statements), APPLY_CHUNK):
                conn.execute("\n".join(statements[i : i + APPLY_CHUNK]).encode())
    except psycopg.Error as exc:
        raise DatabaseError(
            f"{describe(dst_connstr)}: applying the fix failed, nothing changed: {error_text(exc)}"
        ) from None
