"""Sequence values flow from the root to every subscriber as ``SEQ`` events.

The root worker reads each local sequence of ``ferry.seq_info``; a value that moved is
queued (ev_type ``SEQ``, ev_data the value, ev_extra1 the sequence) and remembered, in one
transaction.  Subscribers apply it with ``ferry.seq_advance``, which never moves backwards.
"""

from __future__ import annotations

import psycopg

from pgferry.queue.api import insert_event


def local_sequences(conn: psycopg.Connection, queue: str) -> list[str]:
    rows = conn.execute(
        "select seq_name from ferry.seq_info where queue_name = %s and local order by seq_name",
        (queue,),
    ).fetchall()
    return [r[0] for r in rows]


def publish(conn: psycopg.Connection, queue: str) -> int:
    """Queue the sequences whose value moved; returns how many.  Caller commits."""
    rows = conn.execute(
        """
        select s.seq_name, pg_sequence_last_value(to_regclass(s.seq_name)), s.last_value
          from ferry.seq_info s
         where s.queue_name = %s and s.local and to_regclass(s.seq_name) is not null
         for update of s
        """,
        (queue,),
    ).fetchall()
    sent = 0
    for seq_name, value, published in rows:
        if value is None or (published is not None and value <= published):
            continue
        insert_event(conn, queue, "SEQ", str(value), seq_name)
        conn.execute(
            "update ferry.seq_info set last_value = %s where queue_name = %s and seq_name = %s",
            (value, queue, seq_name),
        )
        sent += 1
    return sent
