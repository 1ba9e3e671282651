"""A small segment's table parts in two round trips instead of five per table.

Replay's usual path reads each table part with a ``COPY ... TO STDOUT`` on the provider in
a read-only transaction of its own (BEGIN, COPY, COMMIT) and loads it with a ``COPY ...
FROM STDIN`` into its stage on the subscriber: five round trips per table before its
handler runs.  Under a steady load most batches are small (a tick's worth of events) and
those round trips are most of their time, which is the replication latency.

So a segment of at most :data:`SMALL_EVENTS` row events is read with ONE provider query:
every part's rows as ``(part number, row as record text)``, the union of the parts' own
queries, in one read-only transaction sent as one message.  The rows are loaded into the
parts' stage tables with ONE message on the subscriber, one ``INSERT ... SELECT`` per
stage from an array of the stage's row type: the record text is parsed by the
destination's column types, the same input functions as COPY's.  The stages and the
handlers are unchanged: what a handler sees is exactly what the usual path gives it.

Runs on the worker's own two connections, inside the caller's transaction on the
subscriber.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql

from pgferry.apply.batch_sql import Segment
from pgferry.apply.plan import TableWork
from pgferry.apply.read import ReplayError, read_only_rows
from pgferry.db import error_text

# Row events (before collapsing) a segment may have for this path: its rows are held in
# the worker's memory as text, where COPY streams them.
SMALL_EVENTS = 1000


def fits(works: Sequence[TableWork]) -> bool:
    """Whether ``works`` are small enough, and read whole, for this path."""
    return (
        len(works) > 1
        and all(w.span is None for w in works)
        and sum(w.rows for w in works) <= SMALL_EVENTS
    )


def read_parts(
    provider: psycopg.Connection, works: Sequence[TableWork], batch_sql: str, segment: Segment
) -> list[list[str]]:
    """Every part's rows as record text, per part in ``works``' order (one query)."""
    union = " union all ".join(
        f"select {number}, q::text from ({work.query(batch_sql, segment)}) q"
        for number, work in enumerate(works)
    )
    rows: list[list[str]] = [[] for _ in works]
    for number, text in read_only_rows(provider, union):
        rows[number].append(text)
    return rows


def load_stages(
    conn: psycopg.Connection, stages: Sequence[sql.Composable], rows: Sequence[list[str]]
) -> None:
    """Load each stage with its rows, all in one message (caller's transaction)."""
    loads = [
        # An array of the stage's row type: each record parsed once ("(r::stage).*" would
        # parse it once per column).
        sql.SQL("insert into {stage} select * from unnest({rows}::text[]::{stage}[])").format(
            stage=stage, rows=sql.Literal(part)
        )
        for stage, part in zip(stages, rows, strict=True)
        if part
    ]
    if not loads:
        return
    try:
        # No parameters and not prepared: the simple query protocol, which takes several
        # statements in one message.
        conn.execute(sql.SQL("; ").join(loads), prepare=False)
    except psycopg.Error as exc:
        raise ReplayError(f"loading the batch's rows: {error_text(exc)}") from None
