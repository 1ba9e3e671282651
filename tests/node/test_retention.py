"""Watermarks: a provider keeps what nodes elsewhere in the cascade need, so change-provider
works after rotation; where nothing protected a tick the move is refused and nothing
changes."""

from __future__ import annotations

import itertools

import psycopg

from pgferry.node import watermarks
from tests.node.watermark_helpers import consumers, hold, publish, rotate, usable

_ids = itertools.count(1000)


def _write(tree, node: str = "root") -> None:
    tree.write(node, "insert into {t} values (%s, 'r')", (next(_ids),))


def test_root_keeps_what_a_leaf_below_a_branch_needs(tree) -> None:
    tree.log_applied("leaf")
    tree.start("branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    tree.stop("leaf")
    at = tree.last_tick("leaf")
    tree.write("root", "insert into {t} select g, 'b' from generate_series(11, 20) g")
    tree.catch_up("branch", "leaf2")

    assert publish(tree, "branch") == at  # the lagging leaf is the branch's watermark
    assert hold(tree, "root", ".branch.watermark") == at
    held = (
        "select xmin::text from ferry_queue.subscription where sub_consumer = '.branch.watermark'"
    )
    before = tree.sql("root", held)
    assert publish(tree, "branch") == at
    assert tree.sql("root", held) == before  # nothing moved: nothing written

    def settle() -> None:
        _write(tree)
        tree.catch_up("branch", "leaf2")
        publish(tree, "branch")
        publish(tree, "leaf2")

    assert rotate(tree, "root", 3, settle) >= 1
    assert usable(tree, "root", at)
    res = tree.cli("leaf", "change-provider", "--provider=root")
    assert res.code == 0, res.err
    assert tree.provider("leaf") == "root"
    assert hold(tree, "root", ".leaf.watermark") == at  # its watermark moved with it
    # A late report to the provider it left holds nothing there.
    with (
        psycopg.connect(tree.dsns["leaf"]) as local,
        psycopg.connect(tree.dsns["branch"], autocommit=True) as former,
    ):
        assert watermarks.publish(local, former, tree.queue, "leaf") is None
    assert not any(
        c.endswith("_leaf_job") or c == ".leaf.watermark" for c in consumers(tree, "branch")
    )

    tree.start("leaf")
    _write(tree)
    tree.catch_up("branch", "leaf", "leaf2")
    expected = tree.rows("root")
    for node in ("branch", "leaf", "leaf2"):
        assert tree.rows(node) == expected, node
    assert tree.applied_twice("leaf") == []
    publish(tree, "branch")  # nothing below it lags any more
    assert hold(tree, "root", ".branch.watermark") > at


def test_move_refused_where_the_tick_is_gone(tree) -> None:
    tree.start("branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    tree.stop("leaf")
    at = tree.last_tick("leaf")

    def settle() -> None:  # no watermark calls: the root only knows its direct consumers
        _write(tree)
        tree.catch_up("branch", "leaf2")

    done = rotate(tree, "root", 3, settle)
    for _ in range(3):  # on a busy server a reader's lock can make a round skip its turn
        if done >= 3:
            break
        done += rotate(tree, "root", 1, settle)
    assert done >= 3
    assert not usable(tree, "root", at)
    res = tree.cli("leaf", "change-provider", "--provider=root")
    assert res.code != 0
    assert f"Node root no longer holds tick {at}" in res.err
    assert "node leaf cannot move under it" in res.err
    assert "Traceback" not in res.err
    assert tree.provider("leaf") == "branch"
    assert tree.sql("leaf", "select paused, uptodate from ferry_node.local_state") == [
        (False, True)
    ]
    assert not any(
        c.endswith("_leaf_job") or c == ".leaf.watermark" for c in consumers(tree, "root")
    )
    assert tree.sql(
        "root", "select count(*) from ferry_node.subscriber_info where subscriber_node = 'leaf'"
    ) == [(0,)]
    tree.start("leaf")  # still served by the branch, which kept its tick
    tree.catch_up("branch", "leaf", "leaf2")
    assert tree.rows("leaf") == tree.rows("root")


def test_a_branch_keeps_what_the_cascade_needs(tree) -> None:
    """The global watermark flows down: leaf2, lagging under the root, can move under the
    branch after the branch's queue rotated."""
    tree.start("branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    tree.stop("leaf2")
    at = tree.last_tick("leaf2")
    _write(tree)
    tree.catch_up("branch", "leaf")
    publish(tree, "leaf")
    publish(tree, "branch")
    assert hold(tree, "branch", ".global_watermark") == at

    def settle() -> None:
        _write(tree)
        tree.catch_up("branch", "leaf")
        publish(tree, "leaf")
        publish(tree, "branch")

    assert rotate(tree, "branch", 3, settle) >= 1
    assert usable(tree, "branch", at)
    res = tree.cli("leaf2", "change-provider", "--provider=branch")
    assert res.code == 0, res.err
    tree.start("leaf2")
    _write(tree)
    tree.catch_up("branch", "leaf", "leaf2")
    expected = tree.rows("root")
    for node in ("branch", "leaf", "leaf2"):
        assert tree.rows(node) == expected, node
    # Nothing lags now: the branch's hold follows the root's lowest position up.
    publish(tree, "leaf2")
    publish(tree, "branch")
    assert hold(tree, "branch", ".global_watermark") > at


def test_drop_node_releases_its_holds(tree) -> None:
    tree.start("branch", "leaf")
    tree.write("root", "insert into {t} values (1, 'a')")
    tree.catch_up("branch", "leaf")
    publish(tree, "leaf")
    assert hold(tree, "branch", ".leaf.watermark") is not None
    tree.stop("leaf")
    res = tree.cli("root", "drop-node", "leaf")
    assert res.code == 0, res.err
    assert hold(tree, "branch", ".leaf.watermark") is None
