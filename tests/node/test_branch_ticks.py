"""A branch announces the ticks it mirrors, so that its own subscribers wake at once.

The branch's worker makes its provider's ticks in its queue with
``session_replication_role = replica`` set; the notification trigger fires anyway.
"""

from __future__ import annotations

import psycopg

from pgferry.queue import ticks as queue_ticks


def test_mirrored_ticks_are_announced(tree) -> None:
    tree.start("branch", "leaf")
    with psycopg.connect(tree.dsns["branch"], autocommit=True) as listener:
        queue_ticks.listen_for_ticks(listener)
        tree.write("root", "insert into {t} values (1, 'a')")
        tick = tree.catch_up("branch", "leaf")
        heard = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert heard and heard[0] == tree.queue
    assert tree.last_tick("leaf") == tick
