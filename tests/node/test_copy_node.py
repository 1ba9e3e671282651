"""add-table / resync --copy-node and --find-copy-node: the initial copy reads from another
node of the cascade, and the hand-over stays exact.

The tree is root -> branch -> leaf, root -> leaf2, plus leaf3 under the branch.  A large
table is copied to the leaf from the root (upstream of its provider, the worker killed once
in the middle of the copy), then to leaf3 from the leaf (a sibling) and to leaf2 from the
leaf (any node, when the provider is the root), all under a write load on the root; in the
end every node holds the root's rows and no copy consumer is left on any queue.
"""

from __future__ import annotations

import random
import threading

import psycopg
import pytest
from psycopg import sql

from pgferry.testing.load import Inserts
from tests.fixtures.fix_cascade import TABLE, TABLE_ID

BIG = 'public."Big é"'
BIG_ID = sql.Identifier("public", "Big é")
ROWS = 150_000  # a copy long enough to stop the worker in its middle


class Changes(threading.Thread):
    """Random inserts, updates and deletes on the root's big table until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.halt, self.done = dsn, threading.Event(), 0
        self.rng = random.Random(11)

    def run(self) -> None:
        upsert = sql.SQL(
            "insert into {t} values (%s, %s, 'i') on conflict (id)"
            " do update set v = {t}.v + 1, note = 'u'"
        ).format(t=BIG_ID)
        delete = sql.SQL("delete from {t} where id = %s").format(t=BIG_ID)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.halt.wait(0.01):
                with conn.transaction():
                    for _ in range(self.rng.randint(1, 5)):
                        key = self.rng.randint(1, ROWS + 1000)
                        if self.rng.random() < 0.8:
                            conn.execute(upsert, (key, self.rng.randint(0, 9)))
                        else:
                            conn.execute(delete, (key,))
                self.done += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)


def _big(tree, node: str) -> list[tuple]:
    return tree.sql(node, sql.SQL("select id, v, note from {} order by id").format(BIG_ID))


def _state(tree, node: str, table: str = BIG) -> list[tuple]:
    return tree.sql(
        node,
        "select merge_state, table_attrs->>'copy_node', copy_source from ferry.table_info"
        " where table_name = %s",
        (table,),
    )


def _copy_consumers(tree, node: str) -> list[str]:
    rows = tree.sql(node, "select sub_consumer from ferry_queue.subscription")
    return [c for (c,) in rows if ".copy." in c]


def _create(tree, ddl: sql.Composable, *nodes: str) -> None:
    for node in nodes:
        tree.sql(node, ddl)


@pytest.mark.slow
def test_copy_from_upstream_and_beside_under_writes(tree, new_db_a) -> None:
    tree.add_node("leaf3", new_db_a(None), "leaf", "branch")
    everyone = ("root", "branch", "leaf", "leaf2", "leaf3")
    _create(tree, sql.SQL("create table {} (id int primary key, v int, note text)").format(
        BIG_ID), *everyone)  # fmt: skip
    tree.sql("root", sql.SQL(
        "insert into {} select g, 0, 'b' from generate_series(1, %s) g").format(BIG_ID),
        (ROWS,))  # fmt: skip
    assert tree.cli("root", "add-table", BIG).code == 0
    assert tree.cli("branch", "add-table", BIG).code == 0
    tree.start("branch")
    tree.start_ticker()
    tree.wait_for(lambda: _state(tree, "branch")[0][0] == "ok", 300, "branch copy")

    changes = Changes(tree.dsns["root"])
    writer = Inserts([tree.dsns["root"]], TABLE_ID, 1000)
    changes.start()
    writer.start()
    try:
        # The leaf copies from the root, two levels up: its group reads the root's queue.
        res = tree.cli("leaf", "add-table", BIG, "--copy-node=root")
        assert res.code == 0, res.err
        tree.start("leaf")
        worker = tree.runners["leaf"].worker
        tree.wait_for(
            lambda: worker.copies_running() > 0 and _state(tree, "leaf")[0][0] == "in-copy",
            60,
            "leaf copy start",
        )
        assert any(c.endswith("@leaf") for c in _copy_consumers(tree, "root"))
        tree.stop("leaf")  # the worker dies in the middle of the copy
        assert _state(tree, "leaf")[0][0] in ("in-copy", "catching-up")
        tree.start("leaf")
        tree.wait_for(lambda: _state(tree, "leaf")[0][0] == "ok", 400, "leaf copy")
        assert _state(tree, "leaf")[0][1:] == ("root", "root")

        # leaf3 copies from its sibling, leaf2 from a node under another branch (its
        # provider is the root): both catch up on their provider from the copy's tick.
        for node in ("leaf3", "leaf2"):
            res = tree.cli(node, "add-table", BIG, "--copy-node=leaf")
            assert res.code == 0, res.err
            tree.start(node)
        for node in ("leaf3", "leaf2"):
            tree.wait_for(lambda n=node: _state(tree, n)[0][0] == "ok", 400, f"{node} copy")
            assert _state(tree, node)[0][1:] == ("leaf", "leaf")
        tree.wait_for(lambda: changes.done > 50, 60, "changes")
    finally:
        changes.stop()
        writer.stop()
        tree.stop_ticker()
    tree.catch_up(*everyone[1:], timeout=300)
    expected = _big(tree, "root")
    for node in everyone[1:]:
        assert _big(tree, node) == expected, node
        assert tree.rows(node) == tree.rows("root"), node
    for node in ("root", "branch"):
        assert _copy_consumers(tree, node) == [], node
    out = tree.cli("leaf", "tables").out
    assert "'copy_node': 'root'" in out


def test_find_copy_node_takes_the_nearest_that_holds_it(tree) -> None:
    small = 'public."Small"'
    ddl = sql.SQL("create table {} (id int primary key, v text)").format(
        sql.Identifier("public", "Small")
    )
    _create(tree, ddl, "root", "branch", "leaf")
    tree.sql("root", 'insert into "Small" select g, g::text from generate_series(1, 500) g')
    assert tree.cli("root", "add-table", small).code == 0
    assert tree.cli("branch", "add-table", small).code == 0  # not copied: branch stopped
    res = tree.cli("leaf", "add-table", small, "--find-copy-node")
    assert res.code == 0, res.err
    assert "'copy_node': '?'" in tree.cli("leaf", "tables").out
    tree.start("leaf")
    tree.start_ticker()
    try:
        # The branch does not hold it ok: the leaf copies from the root (and joins its main
        # stream once the branch, its provider, moves on).
        tree.wait_for(
            lambda: _state(tree, "leaf", small)[0] == ("catching-up", "?", "root"), 120, "copy"
        )
        tree.start("branch")
        tree.wait_for(lambda: _state(tree, "leaf", small)[0][0] == "ok", 120, "leaf copy")
        tree.wait_for(lambda: _state(tree, "branch", small)[0][0] == "ok", 300, "branch copy")
        tree.sql("root", "update \"Small\" set v = 'x' where id <= 10")
        # Now the provider holds it: a resync reads from the branch.
        assert tree.cli("leaf", "resync", small, "--find-copy-node").code == 0
        tree.wait_for(lambda: _state(tree, "leaf", small)[0][0] == "ok", 120, "leaf resync")
        assert _state(tree, "leaf", small)[0][1:] == ("?", None)
    finally:
        tree.stop_ticker()
    tree.catch_up("branch", "leaf")
    query = 'select * from "Small" order by id'
    assert tree.sql("leaf", query) == tree.sql("root", query)
    assert _copy_consumers(tree, "root") == _copy_consumers(tree, "branch") == []


def test_bad_copy_nodes_register_nothing(tree) -> None:
    other = 'public."Other"'
    ddl = sql.SQL("create table {} (id int primary key)").format(sql.Identifier("public", "Other"))
    _create(tree, ddl, "root", "branch", "leaf")
    assert tree.cli("root", "add-table", other).code == 0
    assert tree.cli("branch", "add-table", other).code == 0  # pending: not ok on the branch
    ghost_db = tree.dsns["leaf2"]  # a database that is no node of this name
    tree.sql(
        "leaf",
        "insert into ferry_node.node_location (queue_name, node_name, node_location)"
        " values (%s, 'ghost', %s)",
        (tree.queue, ghost_db),
    )
    tree.sql(
        "leaf",
        "insert into ferry_node.node_location (queue_name, node_name, node_location, dead)"
        " values (%s, 'gone', %s, true)",
        (tree.queue, ghost_db),
    )
    cases = [
        (["--copy-node=nosuch"], "Copy node not found: nosuch (not a member of queue"),
        (["--copy-node=leaf"], "Copy node leaf is this node"),
        (["--copy-node=ghost"], "Node ghost is not a node of queue"),
        (["--copy-node=gone"], "Copy node gone is tagged dead"),
        (["--copy-node=leaf2"], "Copy node leaf2 is neither upstream of this node nor a"),
        (["--copy-node=branch"], f"Table {other} not ok on copy node branch"),
        (["--copy-node=root", "--find-copy-node"], "not allowed with argument"),
        (["--copy-node=root", "--expect-sync"], "exclude each other"),
    ]
    for options, message in cases:
        res = tree.cli("leaf", "add-table", other, *options)
        assert res.code != 0, options
        assert message in res.err, (options, res.err)
        assert len(res.err.strip().splitlines()) == 1, res.err
        assert _state(tree, "leaf", other) == [], options
    res = tree.cli("root", "add-table", 'public."Tbl é"', "--force", "--copy-node=branch")
    assert res.code != 0 and "--copy-node is for branch and leaf nodes only" in res.err
    # Nothing up to the root can serve it: the root's table is applied by a handler that
    # keeps no rows (vtable).
    tree.sql(
        "root",
        'update ferry.table_info set table_attrs = \'{"handler": "vtable"}\' where table_name = %s',
        (other,),
    )
    res = tree.cli("leaf", "add-table", other, "--find-copy-node")
    assert res.code != 0 and "No node from the provider up to the root holds" in res.err
    assert _state(tree, "leaf", other) == []
    # resync: refused the same way, the table stays as it was.
    res = tree.cli("leaf", "resync", TABLE, "--copy-node=nosuch")
    assert res.code != 0 and "Copy node not found: nosuch" in res.err
    assert _state(tree, "leaf", TABLE) == [("ok", None, None)]
