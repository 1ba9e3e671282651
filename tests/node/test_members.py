"""tag-dead / tag-alive, drop-node, wait-root / wait-provider and status with dead nodes."""

from __future__ import annotations


def _dead_flags(tree, node: str) -> dict[str, bool]:
    return dict(tree.sql(node, "select node_name, dead from ferry_node.node_location"))


def test_tag_dead_and_alive(tree) -> None:
    res = tree.cli("leaf", "tag-dead", "leaf2")
    assert res.code == 0, res.err
    for node in ("root", "branch", "leaf"):
        assert _dead_flags(tree, node)["leaf2"] is True, node
    assert _dead_flags(tree, "leaf2")["leaf2"] is False  # a dead node is not contacted
    status = tree.cli("root", "status")
    assert "leaf2 (? dead)" in status.out and "Node is marked dead" in status.out
    members = tree.cli("root", "members")
    assert "password" not in members.out

    res = tree.cli("branch", "tag-alive", "leaf2")
    assert res.code == 0, res.err
    for node in ("root", "branch", "leaf", "leaf2"):
        assert _dead_flags(tree, node)["leaf2"] is False, node

    for args, message in (
        (("tag-dead", "leaf"), "Cannot tag the local node dead: leaf"),
        (("tag-dead", "nosuch"), "Unknown node: nosuch"),
        (("tag-alive", "nosuch"), "Unknown node: nosuch"),
    ):
        res = tree.cli("leaf", *args)
        assert res.code != 0 and message in res.err and "Traceback" not in res.err


def test_status_draws_dead_nodes_in_the_tree(tree) -> None:
    tree.cli("root", "tag-dead", "branch")
    out = tree.cli("leaf2", "status").out.splitlines()
    title = next(i for i, line in enumerate(out) if "branch (" in line)
    assert "dead" in out[title]
    assert out[title].startswith("  +--: ")  # still drawn under the root
    assert any("+--: leaf (leaf)" in line for line in out[title:])
    tree.cli("root", "tag-alive", "branch")
    out = tree.cli("leaf2", "status", "--dead=branch").out
    assert "branch (? dead)" in out


def test_drop_node(tree) -> None:
    res = tree.cli("root", "drop-node", "branch")
    assert res.code != 0 and "Node branch still has subscribers: leaf" in res.err

    res = tree.cli("root", "drop-node", "leaf2")
    assert res.code == 0, res.err
    consumers = [
        r[0] for r in tree.sql("root", "select sub_consumer from ferry_queue.subscription")
    ]
    assert not any(c.endswith("leaf2_job") for c in consumers)
    assert tree.sql("root", "select subscriber_node from ferry_node.subscriber_info") == [
        ("branch",)
    ]
    for node in ("root", "branch", "leaf"):
        assert "leaf2" not in _dead_flags(tree, node), node
    assert tree.sql("leaf2", "select count(*) from ferry_node.node_info") == [(0,)]
    tree.write("leaf2", "insert into {t} values (1, 'free again')")  # no deny trigger left

    # An unreachable node: tagged dead first, dropped from the others.
    tree.cli("root", "tag-dead", "leaf")
    res = tree.cli("root", "drop-node", "leaf")
    assert res.code == 0, res.err
    assert tree.sql("branch", "select count(*) from ferry_node.subscriber_info") == [(0,)]
    assert tree.sql("branch", "select count(*) from ferry_queue.subscription") == [(0,)]
    assert "leaf" not in _dead_flags(tree, "root")

    tree.start("branch")
    tree.write("root", "insert into {t} values (2, 'still flowing')")
    tree.catch_up("branch")
    assert tree.rows("branch") == tree.rows("root")
    res = tree.cli("root", "drop-node", "nosuch")
    assert res.code != 0 and "Unknown node: nosuch" in res.err


def test_wait_root_and_provider(tree) -> None:
    res = tree.cli("root", "wait-provider")
    assert res.code != 0 and "Node root is the root: it has no provider" in res.err
    tree.write("root", "insert into {t} values (1, 'a')")
    tick = tree.tick()
    res = tree.cli("leaf", "wait-root", "--timeout=1", "--poll=0.1")
    assert res.code != 0
    assert f"did not reach tick {tick}" in res.err and "worker running" in res.err

    tree.start("branch", "leaf", "leaf2")
    res = tree.cli("leaf", "wait-root", "--timeout=60", "--poll=0.1")
    assert res.code == 0, res.err
    assert f"applied tick {tick} of root" in res.out
    assert tree.rows("leaf") == tree.rows("root")
    tree.write("root", "insert into {t} values (2, 'b')")
    tick = tree.tick()
    res = tree.cli("leaf2", "wait-provider", "--timeout=60", "--poll=0.1")
    assert res.code == 0 and f"applied tick {tick} of root" in res.out
    assert tree.rows("leaf2") == tree.rows("root")


def test_unreachable_member_errors_hide_secrets(tree) -> None:
    tree.sql(
        "root",
        "update ferry_node.node_location set node_location ="
        " 'host=127.0.0.1 port=1 dbname=gone password=s3cret' where node_name = 'leaf2'",
    )
    for args in (
        ("pause", "--node=leaf2"),
        ("change-provider", "--node=leaf2", "--provider=branch"),
    ):
        res = tree.cli("root", *args)
        assert res.code != 0 and "node leaf2" in res.err, res.err
        assert "s3cret" not in res.err + res.out and "Traceback" not in res.err
    status = tree.cli("root", "status")
    assert "leaf2" in status.out and "s3cret" not in status.out
    res = tree.cli("root", "drop-node", "leaf2")
    assert "s3cret" not in res.err + res.out


def test_drop_node_run_on_itself(tree) -> None:
    res = tree.cli("leaf2", "drop-node", "leaf2")
    assert res.code == 0, res.err
    assert tree.sql("leaf2", "select count(*) from ferry_node.node_info") == [(0,)]
    assert tree.sql("root", "select subscriber_node from ferry_node.subscriber_info") == [
        ("branch",)
    ]
    for node in ("root", "branch", "leaf"):
        assert "leaf2" not in _dead_flags(tree, node), node
    res = tree.cli("leaf2", "status")
    assert res.code != 0 and "Node not initialized" in res.err
