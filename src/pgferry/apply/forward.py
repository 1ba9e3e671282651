"""Branch nodes pass every event of a batch on to their own queue, keeping ev_id.

The copy happens in the transaction that applies the batch, so forwarded events and the
applied tick commit together.  The matching tick (same id, time and event position as the
provider's) is made after that commit: a tick made inside it would not see the forwarded
events as committed.  A crash between the commit and the tick is repaired the next time the
batch is seen (:func:`ensure_tick` is idempotent).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgferry.queue.api import Batch

_COLUMNS = ("ev_id", "ev_time", "ev_retry", "ev_type", "ev_data") + tuple(
    f"ev_extra{i}" for i in range(1, 5)
)


def forward_events(
    local: psycopg.Connection, provider: psycopg.Connection, queue: str, batch_sql: str
) -> int:
    """Copy the batch's events into the local queue's current event table."""
    part = local.execute(
        "select queue_id * 10 + queue_cur_table from ferry_queue.queue where queue_name = %s",
        (queue,),
    ).fetchone()
    if part is None:
        return 0
    cols = sql.SQL(", ").join(map(sql.Identifier, _COLUMNS))
    query = sql.SQL("select {} from ({}) e").format(cols, sql.SQL(batch_sql))
    rows = provider.execute(query).fetchall()
    if not rows:
        return 0
    with local.cursor() as cur:
        cur.executemany(
            sql.SQL("insert into ferry_queue.event (ev_part, {}) values ({}, {})").format(
                cols,
                sql.Literal(part[0]),
                sql.SQL(", ").join(sql.Placeholder() * len(_COLUMNS)),
            ),
            rows,
        )
    return len(rows)


def ensure_tick(local: psycopg.Connection, queue: str, batch: Batch) -> None:
    """Make the provider's tick locally unless it exists (autocommitted on its own)."""
    with local.transaction():
        exists = local.execute(
            """
            select 1 from ferry_queue.tick t join ferry_queue.queue q on q.queue_id = t.tick_queue
             where q.queue_name = %s and t.tick_id = %s
            """,
            (queue, batch.tick_id),
        ).fetchone()
        if not exists:
            local.execute(
                "select ferry_queue.ticker(%s, %s, %s, %s)",
                (queue, batch.tick_id, batch.tick_time, batch.event_seq or 0),
            )
