"""resurrect: an old root that comes back after a failover dumps exactly the events the
cascade never got, becomes a branch without provider, and rejoins with change-provider;
refusals change nothing."""

from __future__ import annotations

import json

import psycopg
import pytest

from pgferry.testing.cascade import write_ini

EXTRA1 = 'public."Tbl é"'  # the table as events name it


def _lost_ids(tree, after: int) -> list[int]:
    return [
        r[0]
        for r in tree.sql("root", "select ev_id from ferry_queue.event where ev_id > %s", (after,))
    ]


def _fail_over(tree) -> list[int]:
    """Writes on the root that nobody gets, then takeover --dead-root by the branch; returns
    the ev_ids of the lost events."""
    tree.start("branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 20) g")
    tree.catch_up()
    tree.stop()
    mark = tree.sql("root", "select max(ev_id) from ferry_queue.event")[0][0]
    tree.write("root", "insert into {t} select g, 'lost' from generate_series(21, 25) g")
    tree.write("root", "update {t} set v = 'lost' where id <= 3")
    tree.tick()  # some of them in a batch nobody read ...
    tree.write("root", "delete from {t} where id = 4")  # ... one not even ticked
    lost = sorted(_lost_ids(tree, mark))
    assert len(lost) == 9
    with tree.gone("root"):
        res = tree.cli("branch", "takeover", "root", "--dead-root")
        assert res.code == 0, res.err
        tree.start("leaf", "leaf2")
        tree.write("branch", "insert into {t} values (100, 'after failover')")
        tree.write("branch", "update {t} set v = 'new root' where id = 5")
        tree.catch_up("leaf", "leaf2")
    return lost


def test_resurrect_and_rejoin(tree) -> None:
    lost = _fail_over(tree)
    dump = tree.tmp_path / "lost.json"
    dump.write_text("earlier\n")
    res = tree.cli("root", "resurrect", f"--dump={dump}")
    assert res.code != 0 and "exists already" in res.err
    assert tree.node_type("root") == "root" and dump.read_text() == "earlier\n"
    dump.unlink()
    tree.start("root")
    worker_lock = (
        "select count(*) from pg_locks where locktype = 'advisory' and granted"
        " and classid = hashtext('pgferry-worker')::oid and database = ("
        "select oid from pg_database where datname = current_database())"
    )
    tree.wait_for(lambda: tree.sql("root", worker_lock) == [(1,)], what="the root's worker")
    res = tree.cli("root", "resurrect", f"--dump={dump}")
    assert res.code != 0 and "The worker of node root is running: stop it" in res.err
    assert tree.node_type("root") == "root" and not dump.exists()
    tree.stop("root")

    res = tree.cli("root", "resurrect", f"--dump={dump}")
    assert res.code == 0, res.err
    assert "Lost events: 9 (after tick" in res.out and str(dump) in res.out
    assert "change-provider --provider=branch" in res.out
    doc = json.loads(dump.read_text(encoding="utf-8"))
    assert doc["format"] == "pgferry-lost-events 1"
    assert (doc["node"], doc["new_root"], doc["count"]) == ("root", "branch", 9)
    assert [e["ev_id"] for e in doc["events"]] == lost
    assert doc["tables"] == {EXTRA1: {"I": 5, "U": 3, "D": 1, "R": 0}}
    assert doc["events"][0]["ev_type"] == "I:id"
    assert json.loads(doc["events"][0]["ev_data"]) == {"id": 21, "v": "lost"}

    # A branch without provider now: writes are refused, nothing is queued after the cut.
    assert tree.node_type("root") == "branch" and tree.provider("root") is None
    assert tree.last_tick("root") == doc["last_tick"]
    assert not set(lost) & set(_lost_ids(tree, 0))
    with pytest.raises(psycopg.Error, match="change not allowed"):
        tree.write("root", "insert into {t} values (999, 'x')")
    assert tree.sql("root", "select merge_state from ferry.table_info") == [(None,)]
    again = tree.cli("root", "resurrect", f"--dump={tree.tmp_path / 'again.json'}")
    assert again.code != 0 and "Node root is a branch, not a root" in again.err

    # Rejoin under the new root; the tables are copied again.
    write_ini(
        tree.configs["root"],
        "londiste3",
        job_name=f"{tree.queue}_root_job",
        db=tree.dsns["root"],
        queue_name=tree.queue,
        loop_delay="0.1",
        exception_sleep="0.2",
        spark_master="local[1]",
    )
    res = tree.cli("root", "change-provider", "--provider=branch")
    assert res.code == 0, res.err
    assert tree.provider("root") == "branch"
    for node in ("branch", "leaf", "leaf2", "root"):
        dead = tree.sql(node, "select dead from ferry_node.node_location where node_name = 'root'")
        assert dead == [(False,)], node
    tree.start("root", "leaf", "leaf2")
    tree.write("branch", "insert into {t} values (101, 'rejoined')")
    tree.wait_for(
        lambda: tree.sql("root", "select merge_state from ferry.table_info") == [("ok",)],
        timeout=240,
        what="the copy on the old root",
    )
    tree.catch_up("root", "leaf", "leaf2")
    expected = tree.rows("branch")
    assert (100, "after failover") in expected and (21, "lost") not in expected
    for node in ("root", "leaf", "leaf2"):
        assert tree.rows(node) == expected, node


def test_resurrect_refusals(tree) -> None:
    dump = tree.tmp_path / "lost.json"
    cases = [
        ("branch", "Node branch is a branch, not a root"),
        ("leaf", "Node leaf is a leaf, not a root"),
        ("root", "Node root is the live root of the cascade"),
    ]
    for node, message in cases:
        res = tree.cli(node, "resurrect", f"--dump={dump}")
        assert res.code != 0 and message in res.err, (node, res.err)
        assert "Traceback" not in res.err
    assert not dump.exists()
    assert tree.node_type("root") == "root"
    assert tree.sql("root", "select queue_external_ticker from ferry_queue.queue") == [(False,)]
    tree.start("branch", "leaf")
    tree.write("root", "insert into {t} values (1, 'still root')")  # capture still there
    tree.catch_up("branch", "leaf")
    assert tree.rows("leaf") == [(1, "still root")]
