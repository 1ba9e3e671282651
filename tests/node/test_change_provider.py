"""change-provider: a leaf moves from the root to the branch under writes, nothing lost or
applied twice; bad requests fail with one line and change nothing."""

from __future__ import annotations

import threading

import psycopg
from psycopg import sql

from pgferry.config import load_config
from pgferry.testing.cascade import Runner
from pgferry.testing.load import Inserts
from tests.fixtures.fix_cascade import TABLE_ID


def _consumers(tree, node: str) -> list[str]:
    return [r[0] for r in tree.sql(node, "select sub_consumer from ferry_queue.subscription")]


def _subscribers(tree, node: str) -> list[str]:
    return [r[0] for r in tree.sql(node, "select subscriber_node from ferry_node.subscriber_info")]


def test_move_leaf_under_branch_while_writing(tree) -> None:
    tree.log_applied("leaf2")
    tree.start("branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 20) g")
    tree.catch_up()
    tree.start_ticker()
    writer = Inserts([tree.dsns["root"]], TABLE_ID, 1000)
    writer.start()
    try:
        tree.wait_for(lambda: writer.next_id > 1030, what="writes")
        res = tree.cli("leaf2", "change-provider", "--provider=branch")
        assert res.code == 0, res.err
        assert "Node leaf2 now reads from branch" in res.out
        tree.wait_for(lambda: writer.next_id > 1080, what="more writes")
    finally:
        writer.stop()
        tree.stop_ticker()
    tree.catch_up()
    expected = tree.rows("root")
    assert len(expected) > 80
    for node in ("branch", "leaf", "leaf2"):
        assert tree.rows(node) == expected, node
    assert tree.applied_twice("leaf2") == []
    assert tree.sql("leaf2", "select count(*) from applied_log") == [(len(expected),)]

    assert tree.provider("leaf2") == "branch"
    job = "leaf2_job"
    assert not any(c.endswith(job) for c in _consumers(tree, "root"))
    assert any(c.endswith(job) for c in _consumers(tree, "branch"))
    assert "leaf2" not in _subscribers(tree, "root")
    assert "leaf2" in _subscribers(tree, "branch")
    status = tree.cli("leaf", "status")
    lines = status.out.splitlines()
    assert lines.index(next(x for x in lines if "branch (branch)" in x)) < lines.index(
        next(x for x in lines if "leaf2 (leaf)" in x)
    )
    again = tree.cli("leaf2", "change-provider", "--provider=branch")
    assert again.code == 0 and "already reads from branch" in again.out


def test_waits_for_a_provider_behind(tree) -> None:
    tree.start("leaf2", "leaf")
    tree.write("root", "insert into {t} values (1, 'a')")
    tree.catch_up("leaf2")
    at = tree.last_tick("leaf2")
    # The branch is stopped: it has not reached leaf2's tick.
    res = tree.cli("leaf2", "change-provider", "--provider=branch", "--timeout=1")
    assert res.code != 0
    assert f"Node branch has not reached tick {at}" in res.err
    assert "Traceback" not in res.err
    assert tree.provider("leaf2") == "root"
    assert tree.sql("leaf2", "select paused from ferry_node.local_state") == [(False,)]
    assert "leaf2" not in _subscribers(tree, "branch")

    result = {}
    mover = threading.Thread(
        target=lambda: result.setdefault(
            "res", tree.cli("leaf2", "change-provider", "--provider=branch", "--timeout=60")
        )
    )
    mover.start()
    tree.start("branch")
    mover.join(90)
    assert result["res"].code == 0, result["res"].err
    tree.write("root", "insert into {t} values (2, 'b')")
    tree.catch_up("branch", "leaf", "leaf2")
    assert tree.rows("leaf2") == tree.rows("root") == tree.rows("leaf")


def test_refused_when_the_new_provider_made_that_tick_at_another_time(tree) -> None:
    """The branch's tick of leaf2's id, made at another time (a standby promoted without
    it makes one under the same id), is not leaf2's tick: the move is refused in one line
    and nothing changes."""
    tree.start("branch", "leaf2")
    tree.write("root", "insert into {t} values (1, 'a')")
    tree.catch_up("branch", "leaf2")
    tree.stop("branch", "leaf2")
    at = tree.last_tick("leaf2")
    tree.sql(
        "branch",
        "update ferry_queue.tick set tick_time = tick_time + interval '1 second'"
        " where tick_id = %s",
        (at,),
    )
    res = tree.cli("leaf2", "change-provider", "--provider=branch", "--timeout=5")
    assert res.code != 0
    assert f"Diverged provider: leaf2 applied tick {at} made at" in res.err
    assert "node branch's tick" in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1, res.err
    assert tree.provider("leaf2") == "root"
    assert tree.sql("leaf2", "select paused from ferry_node.local_state") == [(False,)]
    assert "leaf2" not in _subscribers(tree, "branch")
    assert not any(c.endswith("leaf2_job") for c in _consumers(tree, "branch"))


def test_bad_requests(tree, new_db_a) -> None:
    tree.add_node("branch2", new_db_a(None), "branch", "branch")
    res = tree.cli("root", "change-provider", "--node=branch", "--provider=branch2")
    assert res.code != 0 and "Node branch2 is below branch: it cannot be its provider" in res.err
    cases = [
        (("leaf2", "--provider=leaf2"), "Node leaf2 cannot be its own provider"),
        (("leaf2", "--provider=leaf"), "Node leaf is a leaf: it has no queue to provide"),
        (("leaf2", "--provider=nosuch"), "Unknown node: nosuch"),
        (("root", "--provider=branch"), "Node root is the root: it has no provider"),
        (("leaf2", "--provider=branch", "--node=ghost"), "Unknown node: ghost"),
    ]
    for (node, *args), message in cases:
        res = tree.cli(node, "change-provider", *args)
        assert res.code != 0, args
        assert message in res.err, (args, res.err)
        assert "Traceback" not in res.err and "password" not in res.err
    assert tree.provider("leaf2") == "root"
    assert tree.sql("leaf2", "select paused from ferry_node.local_state") == [(False,)]


def test_move_a_branch_with_its_leaf(tree, new_db_a) -> None:
    """root -> branch2 -> branch -> leaf: the moved branch keeps serving its leaf."""
    tree.add_node("branch2", new_db_a(None), "branch", "root")
    tree.log_applied("leaf")
    tree.start("branch", "branch2", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    res = tree.cli("root", "change-provider", "--node=branch", "--provider=branch2")
    assert res.code == 0, res.err
    tree.write("root", "insert into {t} select g, 'b' from generate_series(11, 20) g")
    tree.write("root", "update {t} set v = 'c' where id <= 5")
    tree.catch_up()
    expected = tree.rows("root")
    for node in ("branch", "branch2", "leaf", "leaf2"):
        assert tree.rows(node) == expected, node
    assert tree.provider("branch") == "branch2"
    assert sorted(tree.applied_twice("leaf")) == [(i, 2) for i in range(1, 6)]  # insert, update


def test_batch_in_flight_from_the_old_provider_is_not_kept(tree) -> None:
    """A batch taken from the old provider before the move and committed after the resume
    must not land: the new provider would start one tick too early."""
    tree.log_applied("leaf2")
    tree.start("branch", "leaf")
    tree.write("root", "insert into {t} values (1, 'a')")
    tree.catch_up("branch")
    leaf2 = Runner(load_config(tree.configs["leaf2"]))
    while leaf2.worker.work():  # leaf2 catches up in this thread
        pass
    tree.write("root", "insert into {t} values (2, 'b')")
    tree.catch_up("branch")
    # leaf2's next apply blocks on the table lock, after it has read its provider.
    blocker = psycopg.connect(tree.dsns["leaf2"])
    blocker.execute(sql.SQL("lock table {} in access exclusive mode").format(TABLE_ID))
    stale = threading.Thread(target=lambda: _work_once(leaf2))
    stale.start()
    tree.wait_for(
        lambda: (
            tree.sql(
                "leaf2",
                "select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
                " and datname = current_database()",
            )[0][0]
            > 0
        ),
        what="leaf2 apply waiting",
    )
    res = tree.cli("leaf2", "change-provider", "--provider=branch")
    assert res.code == 0, res.err
    for i in range(3, 8):  # the branch gets ahead: its next batch spans several ticks
        tree.write("root", "insert into {t} values (%s, 'c')", (i,))
        tree.catch_up("branch")
    blocker.rollback()
    blocker.close()
    stale.join(60)
    tree.start("leaf2")
    tree.catch_up("branch", "leaf", "leaf2")
    assert tree.rows("leaf2") == tree.rows("root")
    assert tree.applied_twice("leaf2") == []


def _work_once(runner) -> None:
    try:
        runner.worker.work()
    except Exception as exc:  # the daemon records it and goes on
        runner.worker.on_error(exc)
    finally:
        runner.worker.shutdown()
