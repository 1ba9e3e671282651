"""Sequence values flow from the root to every subscriber as ``SEQ`` events.

The root worker publishes each local sequence of ``ferry.seq_info`` AHEAD of what the root
hands out: the value sent is the sequence's position plus ``seq_buffer`` values, and it is
sent again once less than half a buffer is left, so whatever the subscribers hold is at or
above anything the root has handed out (the rule is :func:`pgferry.node.seqops.publish_ahead`).
An idle sequence costs one read per loop and no event.  Subscribers apply the value with
``ferry.seq_advance``, which never moves backwards: a new root after a takeover starts past
every value the old one used.
"""

from __future__ import annotations

import psycopg

from pgferry.node import seqops


def publish(conn: psycopg.Connection, queue: str, buffer: int = seqops.DEFAULT_SEQ_BUFFER) -> int:
    """Queue the sequences that are due (see the module docstring); returns how many.
    ``buffer`` is the node's ``seq_buffer`` (:func:`pgferry.node.seqops.seq_buffer`).
    Caller commits."""
    return len(seqops.publish_ahead(conn, queue, buffer))
