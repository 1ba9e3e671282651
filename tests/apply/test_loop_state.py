"""A worker's loop reads its node in one statement: the node, the registry's signature, the
sequences, its own compare request and whether every table is ``ok``, each as the
statements their modules run alone would read them; a database that is not a node of
the queue is named."""

from __future__ import annotations

import psycopg
import pytest

from pgferry.apply import loop_state
from pgferry.errors import NodeError
from pgferry.node import model, seqops
from pgferry.registry import routes


def _reads(pair, queue: str | None = None):
    with psycopg.connect(pair.leaf_dsn, autocommit=True) as conn:
        return loop_state.read_loop(conn, queue or pair.queue)


def test_the_loop_state_what_each_module_reads_alone(pair) -> None:
    for side in (pair.root, pair.leaf):
        side('create table public."Mixed T" (id int primary key)')
        side("create sequence public.s1")
        side("create sequence public.s0")
    pair.add_tables('public."Mixed T"')
    for cfg, dsn in ((pair.root_cfg, pair.root_dsn), (pair.leaf_cfg, pair.leaf_dsn)):
        with psycopg.connect(dsn) as conn:
            seqops.add_seqs(cfg, conn, ["public.s1", "public.s0"])
    pair.catch_up()

    node, reads = _reads(pair)
    with psycopg.connect(pair.leaf_dsn, autocommit=True) as conn:
        assert node == model.load_node(conn, pair.queue)
        assert reads.signature == routes.registry_signature(conn, pair.queue) != ""
    assert node.node_type == "leaf" and node.last_tick_id == pair.last_tick()
    assert reads.seqs == ["public.s0", "public.s1"]
    assert reads.request is None
    assert reads.tables_settled is True

    # A compare request of another consumer is not this node's; its own is, with its age.
    pair.leaf(
        "insert into ferry.sync_request (queue_name, consumer_name, tick_id, state, pause,"
        " requested_at) values (%s, 'someone else', 7, 'wait', true, now()),"
        " (%s, %s, 9, 'wait', false, now() - interval '2 minutes')",
        (pair.queue, pair.queue, node.consumer_name),
    )
    pair.leaf("update ferry.table_info set merge_state = 'catching-up'")
    _, reads = _reads(pair)
    assert reads.request is not None
    assert (reads.request.tick_id, reads.request.pause, reads.request.stale) == (9, False, True)
    assert reads.tables_settled is False


def test_a_database_that_is_not_a_node_of_the_queue_is_named(pair) -> None:
    with pytest.raises(NodeError, match="Node not initialized for queue: no_such_queue"):
        _reads(pair, "no_such_queue")
