"""Several queues in one subscriber database (as on a merge leaf) keep their own
``ferry.seq_info`` rows: a queue's sequence event moves its own row only.

Two pairs whose leaves share one database, both replicating the same sequence: a value
published and applied through one queue leaves the other queue's record where it was.
"""

from __future__ import annotations

import psycopg

from pgferry.node import seqops


def test_sequence_event_moves_only_its_queue_row(make_pair) -> None:
    one, two = make_pair(), make_pair()
    assert one.leaf_dsn == two.leaf_dsn  # one subscriber database, two queues
    seq = f"public.shared_{one.queue}"
    one.root(f"create sequence {seq}")
    one.leaf(f"create sequence {seq}")
    one.root(f"select setval('{seq}', 500)")
    for p in (one, two):
        for cfg, dsn in ((p.root_cfg, p.root_dsn), (p.leaf_cfg, p.leaf_dsn)):
            with psycopg.connect(dsn) as conn:
                seqops.add_seqs(cfg, conn, [seq])

    def recorded() -> dict[str, int | None]:
        rows = one.leaf(
            "select queue_name, last_value from ferry.seq_info where seq_name = %s", (seq,)
        )
        return dict(rows)

    assert recorded() == {one.queue: 500, two.queue: 500}
    root_worker = one.root_worker()
    one.root(f"select setval('{seq}', 1234)")
    root_worker.work()
    one.catch_up()
    published = 1234 + seqops.DEFAULT_SEQ_BUFFER
    assert one.leaf(f"select last_value from {seq}") == [(published,)]
    # The other queue's record is its own: nothing of it came through that queue.
    assert recorded() == {one.queue: published, two.queue: 500}
