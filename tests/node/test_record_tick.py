"""The batch's tick record refuses a moved position: a second applier of the same batch, or
a batch read from a provider the node has left, never lands."""

from __future__ import annotations

import threading

import psycopg
import pytest

from pgferry.errors import NodeError
from pgferry.node import model


def _node(pair) -> model.NodeInfo:
    with psycopg.connect(pair.leaf_dsn, autocommit=True) as conn:
        return model.require_node(conn, pair.queue)


def _record(dsn: str, node: model.NodeInfo, tick: int, prev: int | None, provider=None) -> None:
    with psycopg.connect(dsn) as conn:
        model.record_tick(
            conn, node.queue_name, node.consumer_name, tick, None, prev,
            provider or node.provider_node,
        )  # fmt: skip


def test_refused_positions_change_nothing(pair) -> None:
    pair.catch_up()
    node = _node(pair)
    at = node.last_tick_id
    assert at is not None
    with pytest.raises(NodeError, match="Lost position"):
        _record(pair.leaf_dsn, node, at + 5, at - 1)
    with pytest.raises(NodeError, match="Provider changed"):
        _record(pair.leaf_dsn, node, at + 5, at, provider="elsewhere")
    assert _node(pair).last_tick_id == at
    _record(pair.leaf_dsn, node, at + 5, at)
    assert _node(pair).last_tick_id == at + 5


def test_a_second_applier_waits_and_is_refused(pair) -> None:
    pair.catch_up()
    node = _node(pair)
    at = node.last_tick_id
    assert at is not None
    first = psycopg.connect(pair.leaf_dsn)
    try:
        model.record_tick(first, node.queue_name, node.consumer_name, at + 1, None, at,
                          node.provider_node)  # fmt: skip
        errors: list[BaseException] = []

        def second() -> None:
            try:
                _record(pair.leaf_dsn, node, at + 1, at)
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        # The second applier blocks on the row the first one holds.
        pair.cascade.wait_for(
            lambda: bool(
                pair.leaf(
                    "select 1 from pg_stat_activity where wait_event_type = 'Lock'"
                    " and query like '%%local_state%%'"
                )
            ),
            timeout=20,
            what="the second applier waiting",
        )
        first.commit()
        thread.join(20)
        assert len(errors) == 1 and isinstance(errors[0], NodeError)
        assert "Lost position" in str(errors[0])
    finally:
        first.close()
    assert _node(pair).last_tick_id == at + 1
