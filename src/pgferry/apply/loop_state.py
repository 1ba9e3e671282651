"""What a worker's loop reads on its own node, in one statement.

Each loop reads the node (type, provider, position), the registry's signature, the
replicated sequences, a pending compare request and whether every table is ``ok``.  Read
one statement at a time, in their own transaction, that was eight round trips per loop
(BEGIN, six queries, COMMIT); sent together in a pipeline, two (the COMMIT waits for the
results' sync), and psycopg's pipeline and transaction machinery was a fifth of the
worker's Python in a busy cycle.  Here they are one SELECT on the worker's autocommit
connection to the node: one round trip, one snapshot, prepared by psycopg once it has run
a few times.  Its parts are the queries their modules run alone
(:data:`model.NODE_SQL`, :data:`routes.SIGNATURE_SQL`, ...); a compare request is read
for every consumer of the queue, since the node's consumer name is only known from the
node row read with it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import psycopg
from psycopg.rows import dict_row

from pgferry.node import model
from pgferry.registry import copystate, entries, routes
from pgferry.sync import serve


@dataclass(frozen=True)
class LoopReads:
    """A subscriber's loop reads: what the step needs besides the node."""

    signature: str  # the registry's (routes.registry_signature)
    seqs: list[str]
    request: serve.Request | None
    tables_settled: bool


# The node's columns (NULL when the database is not a node of the queue), then the reads.
_LOOP_SQL = f"""
select n.*, r.*
  from (select ({routes.SIGNATURE_SQL}) as signature,
               array({entries.SEQUENCES_SQL}) as seqs,
               (select json_agg(json_build_array(q.consumer_name, q.tick_id, q.state,
                                                 q.pause, q.overdue))
                  from ({serve.REQUESTS_SQL}) q) as requests,
               ({copystate.SETTLED_SQL}) as settled) r
  left join ({model.NODE_SQL}) n on true
"""
_NODE_FIELDS = tuple(f.name for f in fields(model.NodeInfo))  # NODE_SQL's column names


def read_loop(conn: psycopg.Connection, queue: str) -> tuple[model.NodeInfo, LoopReads]:
    """The node and its loop reads, in one statement on ``conn`` (autocommit).

    The node's schema must exist (the caller checked it once): a missing relation is the
    server's error here.  A database that is not a node of ``queue`` raises NodeError as
    :func:`model.require_node` does.
    """
    # In the order of the parts' placeholders in _LOOP_SQL: signature, sequences,
    # requests (their age limit, the queue), settled, node.
    params = (queue, queue, serve.CHOOSE_LIMIT, queue, queue, queue)
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_LOOP_SQL, params).fetchone()
    assert row is not None  # the reads' row is always there; the node's may be NULLs
    if row["queue_name"] is None:
        raise model.node_missing(queue)
    node = model.NodeInfo(**{name: row[name] for name in _NODE_FIELDS})
    reads = LoopReads(
        signature=row["signature"] or "",
        seqs=list(row["seqs"]),
        request=serve.request_of([tuple(r) for r in row["requests"] or ()], node.consumer_name),
        tables_settled=bool(row["settled"]),
    )
    return node, reads
