"""The major-version upgrade of docs/upgrade.md, walked through: a PostgreSQL 15 root, an 18
node fed by it, takeover to 18 under writes, and the 15 node following 18 as the way back.

The steps are the document's, through the command line (``takeover``, ``status``,
``compare``); workers and a ticker run in threads as the daemons would.
"""

from __future__ import annotations

import pytest

from pgferry.testing.load import Inserts
from tests.fixtures.fix_cascade import TABLE_ID, Tree


@pytest.fixture
def upgrade(make_tree, new_db):
    tree = make_tree("upg", watermark_period="1")
    tree.add_node("pg15", new_db(15), "root", None)
    tree.add_node("pg18", new_db(18), "branch", "pg15")
    try:
        yield tree
    finally:
        tree.stop_ticker()
        tree.stop()


def test_upgrade_15_to_18_and_back(upgrade: Tree) -> None:
    tree = upgrade
    tree.start("pg15", "pg18")
    tree.write("pg15", "insert into {t} select g, 'before' from generate_series(1, 50) g")
    tree.catch_up("pg18")
    # Step 3 of the document: both sides equal, compared at one tick.
    assert tree.cli("pg18", "compare").code == 0
    tree.start_ticker()
    writer = Inserts([tree.dsns["pg15"], tree.dsns["pg18"]], TABLE_ID, 1000)
    writer.start()
    try:
        tree.wait_for(lambda: writer.next_id > 1030, what="writes on 15")
        # Step 4: the switchover.  Writes move to 18; 15 refuses them from now on.
        res = tree.cli("pg18", "takeover", "pg15", "--timeout=60")
        assert res.code == 0, res.err
        tree.wait_for(lambda: writer.next_id > 1080, what="writes on 18")
    finally:
        writer.stop()
        tree.stop_ticker()
    assert tree.node_type("pg18") == "root" and tree.provider("pg18") is None
    assert tree.node_type("pg15") == "branch" and tree.provider("pg15") == "pg18"
    # Step 5: the way back stays open: 15 follows 18, row for row.
    tree.write("pg18", "update {t} set v = 'after' where id <= 10")
    tree.catch_up("pg15")
    assert tree.rows("pg15") == tree.rows("pg18")
    assert len(tree.rows("pg18")) > 100
    assert tree.cli("pg15", "compare").code == 0
    status = tree.cli("pg15", "status")
    assert status.code == 0 and "pg18 (root)" in status.out
