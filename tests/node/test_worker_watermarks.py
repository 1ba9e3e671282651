"""The worker reports its subtree's watermark to its provider by itself."""

from __future__ import annotations

import pytest

from tests.fixtures.fix_cascade import Tree


@pytest.fixture
def quick_tree(make_tree, new_db_a, new_db_b):
    t = make_tree(watermark_period="0.2")
    t.add_node("root", new_db_a(None), "root", None)
    t.add_node("branch", new_db_b(None), "branch", "root")
    t.add_node("leaf", new_db_b(None), "leaf", "branch")
    try:
        yield t
    finally:
        t.stop()


def test_worker_reports_watermarks(quick_tree: Tree) -> None:
    tree = quick_tree
    tree.start("branch", "leaf")
    tree.catch_up("branch", "leaf")

    def holds(node: str) -> set[str]:
        rows = tree.sql(
            node,
            "select sub_consumer from ferry_queue.subscription where sub_consumer like '.%%'",
        )
        return {r[0] for r in rows}

    # The leaf reports to the branch, the branch to the root, and the branch keeps the
    # root's global watermark for its own subtree: all without being asked.
    tree.wait_for(lambda: ".branch.watermark" in holds("root"), what="branch's report")
    tree.wait_for(lambda: ".leaf.watermark" in holds("branch"), what="leaf's report")
    tree.wait_for(lambda: ".global_watermark" in holds("branch"), what="global watermark")
