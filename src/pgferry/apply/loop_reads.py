"""What a worker's loop reads on its own node, in one round trip.

Each loop reads the node (type, provider, position), the registry's signature, the
replicated sequences, a pending compare request and whether every table is ``ok``.  Read
one statement at a time, in their own transaction, that was eight round trips per loop
(BEGIN, six queries, COMMIT), about a fifth of a small batch's cost under load.  Here the
statements are sent together in psycopg's pipeline mode and their results read after one
sync.  The queries are the ones their modules run alone (:data:`model.NODE_SQL`,
:data:`routes.SIGNATURE_SQL`, ...); a compare request is read for every consumer of the
queue, since the node's consumer name is only known from the node row read with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from pgferry.apply import handover, publish_seqs, routes, sync
from pgferry.node import model


@dataclass(frozen=True)
class LoopReads:
    """A subscriber's loop reads: what the step needs besides the node."""

    signature: str  # the registry's (routes.registry_signature)
    seqs: list[str]
    request: sync.Request | None
    tables_settled: bool


def read_loop(conn: psycopg.Connection, queue: str) -> tuple[model.NodeInfo, LoopReads]:
    """The node and its loop reads, in one transaction and one round trip.

    The node's schema must exist (the caller checked it once): a missing relation is the
    server's error here.  A database that is not a node of ``queue`` raises NodeError as
    :func:`model.require_node` does.
    """
    with conn.pipeline(), conn.transaction():
        node_cur = conn.execute(model.NODE_SQL, (queue,))
        sig_cur = conn.execute(routes.SIGNATURE_SQL, (queue,))
        seq_cur = conn.execute(publish_seqs.SEQUENCES_SQL, (queue,))
        req_cur = conn.execute(sync.REQUESTS_SQL, (sync.CHOOSE_LIMIT, queue))
        settled_cur = conn.execute(handover.SETTLED_SQL, (queue,))
        node_row = node_cur.fetchone()  # the first fetch sends them all and syncs
        sig_row = sig_cur.fetchone()
        seqs = [r[0] for r in seq_cur.fetchall()]
        requests = req_cur.fetchall()
        settled_row = settled_cur.fetchone()
    if node_row is None:
        raise model.node_missing(queue)
    node = model.NodeInfo(*node_row)
    reads = LoopReads(
        signature=sig_row[0] if sig_row else "",
        seqs=seqs,
        request=sync.request_of(requests, node.consumer_name),
        tables_settled=bool(settled_row and settled_row[0]),
    )
    return node, reads
