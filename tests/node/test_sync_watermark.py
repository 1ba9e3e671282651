"""create-branch --sync-watermark: two branches keep what each other's subtree needs, so a
node below one can move under the other after rotation, while the root is not held back by
their subtrees."""

from __future__ import annotations

import itertools

import psycopg

from pgferry.config import load_config
from pgferry.node import tableops
from pgferry.testing.cascade import write_ini
from tests.fixtures.fix_cascade import TABLE, TABLE_ID
from tests.node.watermark_helpers import hold, publish, rotate, usable

_ids = itertools.count(1000)


def _add_branch(tree, node: str, dsn: str, provider: str, *options: str):
    """create-branch through the command line, then the table (in sync)."""
    tree.dsns[node] = dsn
    tree.configs[node] = write_ini(
        tree.tmp_path / f"{node}.ini",
        "londiste3",
        job_name=f"{tree.queue}_{node}_job",
        db=dsn,
        queue_name=tree.queue,
        loop_delay="0.1",
        exception_sleep="0.2",
    )
    tree.sql(
        node,
        psycopg.sql.SQL("create table if not exists {} (id int primary key, v text)").format(
            TABLE_ID
        ),
    )
    res = tree.cli(node, "create-branch", node, f"--provider={tree.dsns[provider]}", *options)
    if res.code == 0:
        with psycopg.connect(dsn) as conn:
            options_ = tableops.AddTableOptions(expect_sync=True)
            tableops.add_tables(load_config(tree.configs[node]), conn, [TABLE], options_)
    return res


def test_sync_watermark_pair(tree, new_db_a, new_db_b) -> None:
    for node, dsn, provider in (("sa", new_db_a(None), "root"), ("sb", new_db_b(None), "branch")):
        res = _add_branch(tree, node, dsn, provider, "--sync-watermark=sa,sb")
        assert res.code == 0, res.err
    assert tree.sql("sa", "select node_attrs from ferry_node.node_info") == [
        ("sync_watermark=sa%2Csb",)
    ]
    tree.add_node("sl", new_db_a(None), "leaf", "sa")
    running = ("branch", "leaf", "leaf2", "sa", "sb")
    tree.start(*running, "sl")
    tree.write("root", "insert into {t} select g, 'a' from generate_series(1, 10) g")
    tree.catch_up()
    tree.stop("sl")
    at = tree.last_tick("sl")

    def settle() -> None:
        tree.write("root", "insert into {t} values (%s, 'r')", (next(_ids),))
        tree.catch_up(*running)
        for node in running:
            publish(tree, node)

    settle()
    # sa reports only its own position upstream: the root is not held back by sl ...
    assert hold(tree, "root", ".sa.watermark") == tree.last_tick("sa") > at
    assert hold(tree, "branch", ".global_watermark") > at
    # ... while its peer sb keeps what sl needs.
    assert hold(tree, "sb", ".global_watermark") == at
    assert rotate(tree, "sb", 3, settle) >= 1
    assert usable(tree, "sb", at)

    res = tree.cli("sl", "change-provider", "--provider=sb")
    assert res.code == 0, res.err
    tree.start("sl")
    settle()
    expected = tree.rows("root")
    for node in (*running, "sl"):
        assert tree.rows(node) == expected, node


def test_sync_watermark_refusals(tree, new_db_a) -> None:
    dsn = new_db_a(None)
    for value in ("", ",", "a,,b", "a b"):
        res = _add_branch(tree, "sx", dsn, "root", f"--sync-watermark={value}")
        assert res.code != 0, value
        assert "--sync-watermark: bad node list" in res.err, res.err
        assert "Traceback" not in res.err
        assert tree.sql("sx", "select to_regclass('ferry_node.node_info')") == [(None,)]
    res = tree.cli("leaf2", "create-leaf", "x", "--provider=x", "--sync-watermark=a")
    assert res.code != 0
