"""pause / resume: a paused node applies nothing, and its position cannot move."""

from __future__ import annotations

import psycopg
import pytest


def test_pause_stops_and_resume_continues(tree) -> None:
    tree.start("branch", "leaf", "leaf2")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    assert tree.rows("leaf") == tree.rows("root")

    res = tree.cli("leaf", "pause", "--wait=30")
    assert res.code == 0, res.err
    assert "Node leaf paused" in res.out and "confirmed" in res.out
    at = tree.last_tick("leaf")
    tree.write("root", "insert into {t} values (11, 'b')")
    tree.catch_up("branch", "leaf2")
    assert tree.last_tick("leaf") == at
    assert len(tree.rows("leaf")) == 10
    info = tree.cli("leaf", "node-info")
    assert "PAUSED" in info.out
    status = tree.cli("root", "status")
    assert "PAUSED" in status.out

    again = tree.cli("leaf", "pause")
    assert again.code == 0 and "already paused" in again.out

    res = tree.cli("root", "resume", "--node=leaf")
    assert res.code == 0, res.err
    tree.catch_up("leaf")
    assert tree.rows("leaf") == tree.rows("root")


def test_paused_position_cannot_move(tree) -> None:
    """A batch in flight when the pause commits rolls back as a whole."""
    tree.cli("leaf", "pause")
    with (
        psycopg.connect(tree.dsns["leaf"], application_name="pgferry-worker") as conn,
        pytest.raises(psycopg.Error, match="Node is paused"),
    ):
        conn.execute("update ferry_node.local_state set last_tick_id = last_tick_id + 1")
    # An admin connection (e.g. takeover) may still set it.
    tree.sql("leaf", "update ferry_node.local_state set last_tick_id = last_tick_id")


def test_pause_errors(tree) -> None:
    res = tree.cli("leaf", "pause", "--node=nosuch")
    assert res.code != 0 and "Unknown node: nosuch" in res.err
    assert "Traceback" not in res.err
    tree.cli("leaf", "tag-dead", "leaf2")
    res = tree.cli("leaf", "pause", "--node=leaf2")
    assert res.code != 0 and "marked dead" in res.err
