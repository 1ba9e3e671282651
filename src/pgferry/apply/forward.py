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

from pgferry.queue import api as queue_api
from pgferry.queue.api import Batch


def forward_events(
    local: psycopg.Connection, provider: psycopg.Connection, queue: str, batch_sql: str
) -> int:
    """Copy the batch's events into the local queue's current event table."""
    cols = sql.SQL(", ").join(map(sql.Identifier, queue_api.FORWARDED_COLUMNS))
    # In ev_id order, as the provider's queue holds them.
    query = sql.SQL("select {} from ({}) e order by e.ev_id").format(cols, sql.SQL(batch_sql))
    rows = provider.execute(query).fetchall()
    if not rows:
        return 0
    return queue_api.forward_events(local, queue, rows)


def ensure_tick(local: psycopg.Connection, queue: str, batch: Batch) -> None:
    """Make the provider's tick locally unless it exists (autocommitted on its own)."""
    with local.transaction():
        if not queue_api.tick_exists(local, queue, batch.tick_id):
            queue_api.external_tick(
                local, queue, batch.tick_id, batch.tick_time, batch.event_seq or 0
            )
