"""A quiet subscriber cannot hold back rotation: after ``takeover --all`` a partial leaf
whose tables get none of the writes keeps reporting where it stands, so the new root's
queue rotates under it as under busy nodes."""

from __future__ import annotations

import itertools

import psycopg
import pytest
from psycopg import sql

from pgferry.node import tableops
from tests.fixtures.fix_cascade import TABLE, TABLE_ID
from tests.node.watermark_helpers import hold, rotate

_ids = itertools.count(1)


@pytest.mark.slow
def test_rotation_under_a_quiet_partial_leaf_after_takeover(make_tree, new_db_a, new_db_b):
    t = make_tree(watermark_period="0.2")  # the workers report by themselves, as deployed
    t.add_node("root", new_db_a(None), "root", None)
    t.add_node("branch", new_db_b(None), "branch", "root")
    # "quiet" reads from the root only rows no write makes (id < 0): it applies nothing.
    quiet_dsn = new_db_a(None)
    with psycopg.connect(quiet_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create table {} (id int primary key, v text)").format(TABLE_ID))
    # The same watermark_period as the other nodes: with the default (5 s) every settle
    # below waited out the quiet leaf's period.
    cfg = t.node(
        "quiet",
        quiet_dsn,
        "leaf",
        "root",
        job_name=f"{t.queue}_quiet_job",
        watermark_period=t.watermark_period,
    )
    with psycopg.connect(quiet_dsn) as conn:
        options = tableops.AddTableOptions(expect_sync=True, copy_condition="id < 0")
        tableops.add_tables(cfg, conn, [TABLE], options)

    def write() -> None:
        t.write(t.root(), "insert into {t} values (%s, 'w')", (next(_ids),))

    t.start("root", "branch", "quiet")
    write()
    t.catch_up("branch", "quiet")
    res = t.cli("branch", "takeover", "root", "--all", "--timeout=60")
    assert res.code == 0, res.err
    assert "moved quiet" in res.out and t.provider("quiet") == "branch"
    # The new root keeps no hold of its days as a branch: it would keep old ticks there.
    assert hold(t, "branch", ".global_watermark") is None

    def settle() -> None:
        write()
        tick = t.catch_up("root", "quiet")
        # The quiet leaf's report follows its position, though it applied no row.
        t.wait_for(
            lambda: (hold(t, "branch", ".quiet.watermark") or 0) >= tick,
            timeout=30,
            what="the quiet leaf's watermark at the new root's tick",
        )

    settle()
    assert rotate(t, "branch", 4, settle) >= 3  # each rotation needs every position past the last
    assert t.sql("quiet", sql.SQL("select count(*) from {}").format(TABLE_ID)) == [(0,)]
    assert t.rows("root") == t.rows("branch")
