"""What the retention tests share: the worker's watermark call, forced queue rotation, and
looking at holds and ticks of a node's queue."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from pgferry.config import load_config
from pgferry.node import watermarks


def publish(tree, node: str) -> int | None:
    """What the node's worker does every few seconds."""
    provider = tree.provider(node)
    config = load_config(tree.configs[node])
    with (
        psycopg.connect(tree.dsns[node]) as local,
        psycopg.connect(tree.dsns[provider], autocommit=True) as prov,
    ):
        return watermarks.publish(local, prov, tree.queue, node, config=config)


def hold(tree, node: str, name: str) -> int | None:
    """Position of hold (or consumer) ``name`` on the node's queue."""
    rows = tree.sql(
        node, "select sub_last_tick from ferry_queue.subscription where sub_consumer = %s", (name,)
    )
    return rows[0][0] if rows else None


def usable(tree, node: str, tick: int) -> bool:
    return tree.sql(node, "select ferry_queue.tick_usable(%s, %s)", (tree.queue, tick))[0][0]


def consumers(tree, node: str) -> list[str]:
    return [r[0] for r in tree.sql(node, "select sub_consumer from ferry_queue.subscription")]


def rotate(tree, node: str, rounds: int, settle: Callable[[], None]) -> int:
    """Try ``rounds`` rotations of the node's queue, ``settle()`` (ticks, catch-up, the
    watermark calls) after each; returns how many rotations happened."""
    tree.sql(node, "select ferry_queue.set_queue_config(%s, 'rotation_period', '0')", (tree.queue,))
    done = 0
    for _ in range(rounds):
        before = _cur_table(tree, node)
        for _attempt in range(5):  # a reader's lock makes step 1 skip its turn
            tree.sql(node, "select ferry_queue.maint_rotate_tables_step1(%s)", (tree.queue,))
            if _cur_table(tree, node) != before:
                done += 1
                break
        tree.sql(node, "select ferry_queue.maint_rotate_tables_step2()")
        settle()
    return done


def _cur_table(tree, node: str) -> int:
    return tree.sql(
        node, "select queue_cur_table from ferry_queue.queue where queue_name = %s", (tree.queue,)
    )[0][0]
