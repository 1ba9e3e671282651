"""A provider whose connections are cut again and again while the worker replays (a router
or the provider's host resetting them): each cut is one line naming what failed, the worker
connects again, and the leaf ends equal to the root, nothing lost or doubled.

The root is reached only through a TCP proxy (:mod:`pgferry.testing.tcpproxy`), which
resets every connection open at each cut; no privileges needed.  A silent stall, which a
proxy cannot make, is tests/apply/test_network_stall.py's.
"""

from __future__ import annotations

import logging
import threading

from pgferry.apply.worker import Worker
from pgferry.config import Config
from pgferry.testing.cascade import Cascade, sql_rows
from pgferry.testing.load import Load
from pgferry.testing.scenario import wait_until
from pgferry.testing.tcpproxy import TcpProxy

TABLE = "create table public.t (id bigserial primary key, v text not null)"


def _count(dsn: str) -> int:
    return sql_rows(dsn, "select count(*) from public.t")[0][0]


def test_cut_connections_are_made_again_and_replay_goes_on(
    pg_a, db_a: str, db_b: str, tmp_path, caplog
) -> None:
    with TcpProxy(("127.0.0.1", pg_a.port)) as proxy:
        root_dsn = proxy.connstr(db_a)  # the root's location: every provider read crosses it
        cascade = Cascade("cutq", tmp_path)
        cascade.node("rootnode", root_dsn, "root", job_name="cutroot")
        leaf_cfg = cascade.node("leafnode", db_b, "leaf", "rootnode", job_name="cutleaf")
        for dsn in (db_a, db_b):
            sql_rows(dsn, TABLE)
        cascade.add("rootnode", "public.t")
        cascade.add("leafnode", "public.t")
        cascade.catch_up("leafnode")
        cascade.workers.pop("leafnode").shutdown()

        caplog.set_level(logging.INFO)
        # The commands run in-process above set logging up as the command line does, which
        # replaces the root logger's handlers, the capture's among them.
        if caplog.handler not in logging.getLogger().handlers:
            logging.getLogger().addHandler(caplog.handler)
        worker = Worker(Config(leaf_cfg.path, leaf_cfg.section, dict(leaf_cfg.values)))
        loop = threading.Thread(target=worker.run_forever, daemon=True)

        def insert(conn, done: int) -> None:
            conn.execute("insert into public.t (v) values (%s)", (f"w{done}",))

        def tick(conn, _done: int) -> None:
            conn.execute("select ferry_queue.force_tick(%s)", (cascade.queue,))
            conn.execute("select ferry_queue.ticker(%s)", (cascade.queue,))

        # Straight to the root's server: the cuts are the worker's alone.
        writer = Load(db_a, insert, every=0.01, transaction=False)
        ticker = Load(db_a, tick, every=0.2, transaction=False)
        writer.start()
        ticker.start()
        loop.start()
        try:
            for round_ in range(3):
                seen = _count(db_b)
                wait_until(lambda s=seen: _count(db_b) > s + 50, 60, f"replay before cut {round_}")
                accepted = proxy.accepted
                assert proxy.cut() > 0
                # The worker connects to the provider again, and replays on.
                wait_until(lambda a=accepted: proxy.accepted > a, 60, "a new connection")
            writer.stop()
            target = cascade.tick()
            wait_until(
                lambda: (cascade.last_tick("leafnode") or 0) >= target, 60, "replay to the end"
            )
        finally:
            writer.stop()
            ticker.stop()
            worker.stopping = True
            loop.join(timeout=60)
        assert not loop.is_alive(), "the worker did not stop"
    query = "select id, v from public.t order by id"
    rows = sql_rows(db_a, query)
    assert len(rows) > 150
    assert sql_rows(db_b, query) == rows
    # A cut met in a batch stops the loop (the daemon's error line); one met while the
    # worker waits for a tick is the worker's warning.
    said = [r for r in caplog.records
            if r.name in ("pgferry.daemon", "pgferry.apply.worker")
            and r.levelno >= logging.WARNING]  # fmt: skip
    assert said, "no cut was noticed"
    assert all("\n" not in r.getMessage() and not r.exc_info for r in said), [
        r.getMessage() for r in said
    ]
