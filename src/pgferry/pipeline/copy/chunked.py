"""Chunked copy: a table's primary-key range in chunks, each read in its own short transaction.

The one-snapshot copy (:func:`pgferry.pipeline.copy.copy_tables`) holds one exported
snapshot on the source from its first row to its last: on a large table, hours of a held
``xmin`` horizon.  Here no snapshot outlives a chunk: the key range is split once into
chunks of about ``chunk_rows`` rows (boundaries sampled as compare samples them,
:mod:`pgferry.pipeline.keyranges`), recorded in ``ferry_copy.chunk`` on the destination,
and each chunk is one ``COPY (select ... where key in range) TO STDOUT`` in a source
transaction of its own, streamed into the destination in a transaction that also records
it in ``ferry_copy.range_done``.  The rows read are therefore of many points in time; the
caller makes them consistent by replaying every event after a tick taken before the first
chunk (``docs/replication.md``, "Chunked copy").  ``parallel`` streams (threads of the
driver with a connection pair each) take the chunks in order.

Resume: with ``resume`` and a plan recorded for ``copy_id``, the destination is not emptied
and only the chunks ``range_done`` lacks are copied, with the recorded boundaries.  Runs on
the driver: the two servers do the work, no Spark is needed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg import sql

from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError, PgferryError
from pgferry.pipeline.copy.destination import (
    done_rows,
    ensure_bookkeeping,
    finish_destination,
    prepare_destination,
)
from pgferry.pipeline.copy.keys import copied_key
from pgferry.pipeline.copy.plan import CopyTask, estimates, plan_tables
from pgferry.pipeline.copy.task import BlockRange, CopyJob, _copy
from pgferry.pipeline.keyranges import KeyRange, KeySpec, row_estimate, sample_boundaries
from pgferry.pipeline.tables import resolve_table

log = logging.getLogger(__name__)

CHUNK_ROWS = 100_000
STREAMS = 2  # chunks copied at once (--max-parallel-copy sets it)


def copy_chunked(
    src_connstr: str,
    dst_connstr: str,
    tasks: list[CopyTask],
    *,
    copy_id: str,
    chunk_rows: int = CHUNK_ROWS,
    resume: bool = False,
    parallel: int = STREAMS,
    on_totals: Callable[[dict[str, int | None]], None] | None = None,
    cancelled: threading.Event | None = None,
) -> dict[str, int]:
    """Copy ``tasks`` chunk by chunk (see the module docstring); rows per dest_table."""
    if not tasks:
        raise PgferryError("copy: no tables given")
    started = time.monotonic()
    with connect(src_connstr, autocommit=True) as conn:
        sources = [resolve_table(conn, t.source_table, describe(src_connstr)) for t in tasks]
        src_major = conn.info.server_version // 10000
    with connect(dst_connstr, autocommit=True) as conn:
        dests = [resolve_table(conn, t.dest_table, describe(dst_connstr)) for t in tasks]
        same_major = conn.info.server_version // 10000 == src_major
        ensure_bookkeeping(conn)
        planned = recorded_chunks(conn, copy_id) if resume else {}
    plans, _ = plan_tables(tasks, sources, dests, 1, binary=same_major)
    specs = [KeySpec.of(s) for s in sources]
    totals = estimates(tasks, sources)
    if resume and all(t.dest_table in planned for t in tasks):
        log.info("copy %s: resuming chunks", ", ".join(t.dest_table for t in tasks))
    else:
        keys = [copied_key(s, p) for s, p in zip(sources, plans, strict=True)]
        prepare_destination(dst_connstr, tasks, dests, keys)
        with connect(src_connstr, autocommit=True) as conn:
            planned = {
                t.dest_table: _split(sample_boundaries(conn, s, spec, chunk_rows))
                for t, s, spec in zip(tasks, sources, specs, strict=True)
            }
            for t, s in zip(tasks, sources, strict=True):
                if totals.get(t.dest_table) is None and not t.copy_condition:
                    totals[t.dest_table] = row_estimate(conn, s)  # what the sample counted
        _record_plan(dst_connstr, copy_id, planned)
    if on_totals is not None and (not resume or any(v is not None for v in totals.values())):
        on_totals(totals)
    job = CopyJob(src_connstr, dst_connstr, "", copy_id, tuple(plans))
    with connect(dst_connstr, autocommit=True) as conn:
        done = _done_chunks(conn, copy_id)
    todo = [
        (plan_no, chunk_no, spec.predicate(rng))
        for plan_no, (plan, spec) in enumerate(zip(plans, specs, strict=True))
        for chunk_no, rng in enumerate(planned[plan.dest_key])
        if (plan.dest_key, chunk_no) not in done
    ]
    # A few streams at once, each taking the next chunk: still one short source
    # transaction per chunk and stream.
    streams = max(1, min(len(todo), parallel))
    failed = threading.Event()  # one stream failed: the others stop after their chunk

    def stream(_: int) -> int:
        try:
            return _stream(job, todo, cancelled, failed)
        except BaseException:
            failed.set()
            raise

    with ThreadPoolExecutor(streams, thread_name_prefix="pgferry-chunk") as pool:
        copied = sum(pool.map(stream, range(streams)))
    rows = done_rows(dst_connstr, copy_id)
    finish_destination(dst_connstr, dests, copy_id)
    log.info("copy %s: %d rows in chunks (%d now), %.1fs",
             ", ".join(t.dest_table for t in tasks), sum(rows.values()), copied,
             time.monotonic() - started)  # fmt: skip
    return {t.dest_table: rows.get(t.dest_table, 0) for t in tasks}


def _stream(
    job: CopyJob,
    todo: list[tuple[int, int, sql.Composable]],
    cancelled: threading.Event | None,
    failed: threading.Event,
) -> int:
    """Copy chunks taken off ``todo`` until none is left (or another stream failed)."""
    copied = 0
    with (
        connect(job.src_connstr, autocommit=True, application_name="pgferry-copy") as src,
        connect(job.dst_connstr) as dst,
    ):
        while not failed.is_set():
            try:
                plan_no, chunk_no, where = todo.pop(0)  # atomic under the GIL
            except IndexError:
                return copied
            if cancelled is not None and cancelled.is_set():
                raise PgferryError("copy cancelled")
            copied += _copy_chunk(job, plan_no, chunk_no, where, src, dst)
    return copied


def _copy_chunk(
    job: CopyJob,
    plan_no: int,
    chunk_no: int,
    where: sql.Composable,
    src: psycopg.Connection,
    dst: psycopg.Connection,
) -> int:
    """One chunk: one short source transaction, one destination transaction."""
    plan = job.plans[plan_no]
    try:
        with src.transaction():  # the only source transaction the chunk holds
            return _copy(job, plan, BlockRange(plan_no, chunk_no, None, None), src, dst, where)
    except psycopg.Error as exc:
        # A source gone silent (db.NETWORK_DEFAULTS broke the connection) is named.
        lost = f"source {describe(job.src_connstr)}: " if src.broken else ""
        raise DatabaseError(
            f"copy {plan.dest_key} chunk {chunk_no}: {lost}{error_text(exc)}"
        ) from None


def _split(boundaries: list[tuple[str, ...]]) -> list[KeyRange]:
    """Chunks between sorted boundaries: the first and the last are open-ended."""
    bounds: list[tuple[str, ...] | None] = [None, *boundaries, None]
    return [KeyRange(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]


def _record_plan(dst_connstr: str, copy_id: str, planned: dict[str, list[KeyRange]]) -> None:
    with connect(dst_connstr) as conn, conn.transaction():
        conn.execute("delete from ferry_copy.chunk where copy_id = %s", (copy_id,))
        conn.execute("delete from ferry_copy.range_done where copy_id = %s", (copy_id,))
        with conn.cursor() as cur:
            cur.executemany(
                "insert into ferry_copy.chunk (copy_id, dest_table, chunk_no, lower_key,"
                " upper_key) values (%s, %s, %s, %s, %s)",
                [
                    (copy_id, dest, no, _key(r.lower), _key(r.upper))
                    for dest, ranges in planned.items()
                    for no, r in enumerate(ranges)
                ],
            )


def _key(key: tuple[str, ...] | None) -> list[str] | None:
    return None if key is None else list(key)


def recorded_chunks(conn: psycopg.Connection, copy_id: str) -> dict[str, list[KeyRange]]:
    """The chunks planned for ``copy_id`` per dest_table (empty: none recorded)."""
    rows = conn.execute(
        "select dest_table, lower_key, upper_key from ferry_copy.chunk"
        " where copy_id = %s order by dest_table, chunk_no",
        (copy_id,),
    ).fetchall()
    planned: dict[str, list[KeyRange]] = {}
    for dest, lower, upper in rows:
        lo = None if lower is None else tuple(lower)
        planned.setdefault(dest, []).append(KeyRange(lo, None if upper is None else tuple(upper)))
    return planned


def _done_chunks(conn: psycopg.Connection, copy_id: str) -> set[tuple[str, int]]:
    rows = conn.execute(
        "select dest_table, range_no from ferry_copy.range_done where copy_id = %s", (copy_id,)
    ).fetchall()
    return {(r[0], r[1]) for r in rows}
