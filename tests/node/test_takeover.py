"""takeover: switchover of the root under writes, failover of a dead root, a branch taking
the place of another, and refusals that leave everything as it was."""

from __future__ import annotations

import psycopg
import pytest

from pgferry.testing.load import Inserts
from tests.fixtures.fix_cascade import TABLE_ID


def _same_everywhere(tree, nodes=("root", "branch", "leaf", "leaf2")) -> list[tuple]:
    source = tree.root()
    expected = tree.rows(source)
    for node in nodes:
        assert tree.rows(node) == expected, node
    return expected


def test_switchover_under_writes(tree) -> None:
    tree.log_applied("leaf")
    tree.log_applied("leaf2")
    tree.start("root", "branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 20) g")
    tree.catch_up()
    tree.start_ticker()
    writer = Inserts([tree.dsns["root"], tree.dsns["branch"]], TABLE_ID, 1000)
    writer.start()
    try:
        tree.wait_for(lambda: writer.next_id > 1030, what="writes")
        res = tree.cli("branch", "takeover", "root", "--timeout=60")
        assert res.code == 0, res.err
        assert "Node branch is now root" in res.out
        tree.wait_for(lambda: writer.next_id > 1080, what="writes on the new root")
    finally:
        writer.stop()
        tree.stop_ticker()
    assert writer.refused > 0  # writes moved from the old root to the new one
    assert tree.node_type("branch") == "root" and tree.provider("branch") is None
    assert tree.node_type("root") == "branch" and tree.provider("root") == "branch"
    assert tree.provider("leaf") == "branch" and tree.provider("leaf2") == "root"
    tree.catch_up("root", "leaf", "leaf2")
    expected = _same_everywhere(tree)
    assert len(expected) > 80
    for node in ("leaf", "leaf2"):
        assert tree.applied_twice(node) == []
        assert tree.sql(node, "select count(*) from applied_log") == [(len(expected),)]
    # Capture moved with the role: the old root refuses writes, the new one queues them.
    with pytest.raises(psycopg.Error, match="change not allowed"):
        tree.write("root", "insert into {t} values (99999, 'x')")
    tree.write("branch", "update {t} set v = 'new root' where id = 1")
    tree.catch_up("root", "leaf", "leaf2")
    assert tree.rows("leaf2")[0] == (1, "new root")
    status = tree.cli("leaf2", "status")
    assert status.out.splitlines()[2].startswith("branch (root)")


def test_failed_switchover_restores_the_root(tree) -> None:
    tree.start("leaf2")
    res = tree.cli("branch", "takeover", "root", "--timeout=1")
    assert res.code != 0 and "Node branch did not reach tick" in res.err
    assert "Traceback" not in res.err
    assert tree.node_type("root") == "root" and tree.node_type("branch") == "branch"
    assert tree.sql("root", "select queue_external_ticker from ferry_queue.queue") == [(False,)]
    assert tree.sql("root", "select paused from ferry_node.local_state") == [(False,)]
    assert tree.sql("branch", "select paused from ferry_node.local_state") == [(False,)]
    tree.write("root", "insert into {t} values (5, 'after')")
    tree.start("branch", "leaf")
    tree.catch_up()
    _same_everywhere(tree)
    assert tree.rows("leaf") == [(5, "after")]


def test_takeover_refusals(tree) -> None:
    cases = [
        ("leaf", ("root",), "Node leaf is a leaf: only a branch can take over"),
        ("branch", ("branch",), "Node branch cannot take over itself"),
        ("branch", ("ghost",), "Unknown node: ghost"),
        ("branch", ("leaf2",), "Node leaf2 is a leaf: there is nothing to take over"),
    ]
    for node, args, message in cases:
        res = tree.cli(node, "takeover", *args)
        assert res.code != 0 and message in res.err, (args, res.err)
    tree.sql("branch", "update ferry.table_info set merge_state = null")
    res = tree.cli("branch", "takeover", "root")
    assert res.code != 0 and "is not ok on node branch" in res.err
    assert tree.node_type("root") == "root"
    assert tree.sql("root", "select queue_external_ticker from ferry_queue.queue") == [(False,)]


def test_failover_of_a_dead_root(tree) -> None:
    tree.start("branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 20) g")
    tree.catch_up()
    tree.stop("branch", "leaf", "leaf2")
    with tree.gone("root"):
        res = tree.cli("branch", "takeover", "root", "--dead-root")
        assert res.code == 0, res.err
        assert "Node branch is now root in place of dead root" in res.out
        assert "moved leaf2" in res.out
        assert tree.node_type("branch") == "root"
        assert tree.provider("leaf2") == "branch"
        for node in ("branch", "leaf", "leaf2"):
            dead = tree.sql(
                node, "select dead from ferry_node.node_location where node_name = 'root'"
            )
            assert dead == [(True,)], node
        tree.start("leaf", "leaf2")
        tree.write("branch", "insert into {t} values (100, 'after failover')")
        tree.catch_up("leaf", "leaf2")
        _same_everywhere(tree, ("branch", "leaf", "leaf2"))
        status = tree.cli("leaf", "status")
        assert status.code == 0
        assert "root (? dead)" in status.out and "Node is marked dead" in status.out


def _another_tick(tree, node: str, tick: int) -> None:
    """``node``'s tick ``tick`` made again at another time, as a standby promoted without
    that tick makes one under the same id."""
    tree.sql(
        node,
        "update ferry_queue.tick set tick_time = tick_time + interval '1 second'"
        " where tick_id = %s",
        (tick,),
    )


def test_dead_root_failover_leaves_a_subscriber_whose_tick_differs(tree) -> None:
    """The new root's tick of leaf2's id, made at another time, is another tick: leaf2 is
    not moved there (it would skip or repeat events), and the summary says so."""
    tree.start("branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 20) g")
    tree.catch_up()
    tree.stop("branch", "leaf", "leaf2")
    at = tree.last_tick("leaf2")
    _another_tick(tree, "branch", at)
    with tree.gone("root"):
        res = tree.cli("branch", "takeover", "root", "--dead-root")
        assert res.code == 0, res.err
        assert "Node branch is now root in place of dead root" in res.out
        assert "not moved (their last tick is another tick on branch" in res.out
        assert "leaf2" in res.out.split("not moved")[1] and "moved leaf2" not in res.out
        assert f"Diverged provider: leaf2 applied tick {at}" in res.err
        assert tree.provider("leaf2") == "root"
        assert "leaf2" not in [
            r[0]
            for r in tree.sql("branch", "select subscriber_node from ferry_node.subscriber_info")
        ]


def test_failover_catches_up_from_a_sibling_ahead(tree, new_db_a) -> None:
    tree.add_node("branch2", new_db_a(None), "branch", "root")
    tree.start("branch", "branch2", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    tree.stop("branch")
    tree.write("root", "insert into {t} select g, 'b' from generate_series(11, 20) g")
    tree.catch_up("branch2", "leaf2")
    assert (tree.last_tick("branch2") or 0) > (tree.last_tick("branch") or 0)
    tree.stop()
    with tree.gone("root"):
        tree.start("branch", "branch2", "leaf", "leaf2")
        res = tree.cli("branch", "takeover", "root", "--dead=root", "--timeout=60")
        assert res.code == 0, res.err
        assert tree.node_type("branch") == "root"
        assert tree.provider("branch2") == "branch" and tree.provider("leaf2") == "branch"
        tree.write("branch", "insert into {t} values (100, 'after failover')")
        tree.catch_up("branch2", "leaf", "leaf2")
        rows = _same_everywhere(tree, ("branch", "branch2", "leaf", "leaf2"))
        assert len(rows) == 21


def test_branch_takes_the_place_of_its_provider(tree, new_db_a) -> None:
    tree.add_node("branch2", new_db_a(None), "branch", "branch")
    tree.start("branch", "leaf", "leaf2", "branch2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    res = tree.cli("branch2", "takeover", "branch", "--all", "--timeout=60")
    assert res.code == 0, res.err
    assert tree.provider("branch2") == "root"
    assert tree.provider("branch") == "branch2"
    assert tree.provider("leaf") == "branch2"
    tree.write("root", "insert into {t} values (50, 'moved')")
    tree.catch_up("branch2", "branch", "leaf", "leaf2")
    _same_everywhere(tree, ("branch", "branch2", "leaf", "leaf2"))


def test_switchover_all_moves_the_other_subscribers(tree) -> None:
    tree.start("root", "branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    res = tree.cli("branch", "takeover", "root", "--all", "--timeout=60")
    assert res.code == 0, res.err
    assert "moved leaf2" in res.out
    assert tree.provider("leaf2") == "branch" and tree.provider("root") == "branch"
    tree.write("branch", "delete from {t} where id > 5")
    tree.catch_up("root", "leaf", "leaf2")
    assert len(_same_everywhere(tree)) == 5
    assert tree.sql("root", "select count(*) from ferry_node.subscriber_info") == [(0,)]


def _leaf2_in_a_hole(tree) -> int:
    """Leave leaf2 (under the root) on a tick the branch never held: the branch, behind,
    read past it in one batch.  Workers are stepped here; returns that tick."""
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up("branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'b' from generate_series(11, 20) g")
    hole = tree.catch_up("leaf2")
    tree.write("root", "insert into {t} select g, 'c' from generate_series(21, 30) g")
    tree.tick()
    tree.catch_up("branch", "leaf")
    assert tree.last_tick("leaf2") == hole
    assert tree.sql(
        "branch", "select count(*) from ferry_queue.tick where tick_id = %s", (hole,)
    ) == [(0,)]
    tree.close()  # the stepped workers let go of their nodes: runners take over
    tree.workers.clear()
    return hole


def test_switchover_all_refused_whole_when_a_subscriber_lags(tree) -> None:
    hole = _leaf2_in_a_hole(tree)
    tree.start("root", "branch", "leaf")  # leaf2's worker is down: it stays on the hole
    res = tree.cli("branch", "takeover", "root", "--all", "--timeout=2")
    assert res.code != 0 and "Traceback" not in res.err
    assert "Node leaf2 did not reach tick" in res.err and f"(at tick {hole};" in res.err
    assert len(res.err.strip().splitlines()) == 1, res.err
    # Nothing changed: the root still captures and ticks, the branch reads from it.
    assert tree.node_type("root") == "root" and tree.node_type("branch") == "branch"
    assert tree.provider("branch") == "root" and tree.provider("leaf2") == "root"
    assert tree.sql("root", "select queue_external_ticker from ferry_queue.queue") == [(False,)]
    for node in ("root", "branch", "leaf2"):
        assert tree.sql(node, "select paused from ferry_node.local_state") == [(False,)], node
    tree.write("root", "update {t} set v = 'after' where id <= 5")
    tree.start("leaf2")
    tree.catch_up("branch", "leaf", "leaf2")
    assert len(_same_everywhere(tree)) == 30


def test_switchover_all_under_writes_moves_a_lagging_subscriber(tree) -> None:
    hole = _leaf2_in_a_hole(tree)
    tree.start("root", "branch", "leaf", "leaf2")
    tree.start_ticker()
    writer = Inserts([tree.dsns["root"], tree.dsns["branch"]], TABLE_ID, 1000)
    writer.start()
    try:
        tree.wait_for(lambda: writer.next_id > 1020, what="writes")
        res = tree.cli("branch", "takeover", "root", "--all", "--timeout=60")
        assert res.code == 0, res.err
        assert "Node branch is now root" in res.out and "moved leaf2" in res.out
        assert "make sure one runs for database" in res.out
        tree.wait_for(lambda: writer.next_id > 1060, what="writes on the new root")
    finally:
        writer.stop()
        tree.stop_ticker()
    assert (tree.last_tick("leaf2") or 0) > hole
    assert tree.provider("leaf2") == "branch" and tree.provider("root") == "branch"
    assert tree.provider("leaf") == "branch" and tree.node_type("branch") == "root"
    tree.catch_up("root", "leaf", "leaf2")
    assert len(_same_everywhere(tree)) > 60


def test_branch_takeover_all_refused_before_any_move(tree, new_db_a) -> None:
    """leaf (under branch) stands on a tick branch2 read past in one batch: it could not
    move under branch2, so nothing moves, branch2 included."""
    tree.add_node("branch2", new_db_a(None), "branch", "branch")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up("branch", "branch2", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'b' from generate_series(11, 20) g")
    hole = tree.catch_up("branch", "leaf")
    tree.write("root", "insert into {t} select g, 'c' from generate_series(21, 30) g")
    tree.catch_up("branch")
    tree.catch_up("branch", "branch2")  # branch2, behind, takes one batch across the hole
    assert tree.sql(
        "branch2", "select count(*) from ferry_queue.tick where tick_id = %s", (hole,)
    ) == [(0,)]
    res = tree.cli("branch2", "takeover", "branch", "--all", "--timeout=10")
    assert res.code != 0 and "Traceback" not in res.err
    last = res.err.strip().splitlines()[-1]
    assert last.startswith("pgferry: takeover refused, nothing changed: node leaf cannot move")
    assert f"does not hold tick {hole}" in last
    assert tree.provider("branch2") == "branch" and tree.provider("leaf") == "branch"
    assert tree.provider("branch") == "root"
    tree.catch_up("branch", "branch2", "leaf", "leaf2")
    assert len(_same_everywhere(tree, ("branch", "branch2", "leaf", "leaf2"))) == 30


def test_branch_takeover_checks_the_movers_paused(tree, new_db_a, monkeypatch) -> None:
    """Under writes, a mover's worker still running could step, between the check of its
    tick and its move, onto a tick the new branch never held: the takeover would stop
    half-way.  The movers (the old branch too) are paused when their ticks are checked,
    and resumed after the moves."""
    from pgferry.node import takeover

    tree.add_node("branch2", new_db_a(None), "branch", "root")
    tree.start("branch", "leaf", "leaf2", "branch2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    movers = ("leaf", "branch")
    seen: list[tuple[bool, ...]] = []
    real = takeover.missing_tick

    def checked(c, name, tick):
        seen.append(tuple(tree.sql(n, "select paused from ferry_node.local_state")[0][0]
                          for n in movers))  # fmt: skip
        return real(c, name, tick)

    monkeypatch.setattr(takeover, "missing_tick", checked)
    res = tree.cli("branch2", "takeover", "branch", "--all", "--timeout=60")
    assert res.code == 0, res.err
    assert seen and all(s == (True, True) for s in seen), seen
    assert [tree.provider(n) for n in movers] == ["branch2", "branch2"]
    assert [tree.sql(n, "select paused from ferry_node.local_state")[0][0] for n in movers] == [
        False,
        False,
    ]
    tree.write("root", "insert into {t} values (50, 'moved')")
    tree.catch_up("branch2", "branch", "leaf", "leaf2")
    _same_everywhere(tree, ("branch", "branch2", "leaf", "leaf2"))
