"""A root + leaf pair on the two session clusters, driven in-process.

``pair`` builds the cascade with the real admin code (create-root / create-leaf /
add-table), and offers helpers: run SQL on either side, make a tick, and run the leaf's
worker until it has applied everything the root has ticked.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from pgferry.apply.worker import Worker
from pgferry.config import Config, load_config
from pgferry.node import setup, tableops

_names = itertools.count(1)


def write_ini(path: Path, **values: str) -> Config:
    lines = ["[pgferry]"] + [f"{k} = {v}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return load_config(path)


@dataclass
class Pair:
    root_dsn: str
    leaf_dsn: str
    root_cfg: Config
    leaf_cfg: Config
    queue: str
    workers: list[Worker] = field(default_factory=list)
    _default: Worker | None = None

    def sql(self, dsn: str, query: str, params=None) -> list[tuple]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def root(self, query: str, params=None) -> list[tuple]:
        return self.sql(self.root_dsn, query, params)

    def leaf(self, query: str, params=None) -> list[tuple]:
        return self.sql(self.leaf_dsn, query, params)

    def tick(self) -> int:
        with psycopg.connect(self.root_dsn, autocommit=True) as conn:
            conn.execute("select ferry_queue.force_tick(%s)", (self.queue,))
            row = conn.execute("select ferry_queue.ticker(%s)", (self.queue,)).fetchone()
            if row and row[0] is None:
                # A copy running beside the worker ticked the forced tick first.
                row = conn.execute(
                    "select last_tick_id from ferry_queue.get_queue_info(%s)", (self.queue,)
                ).fetchone()
            assert row and row[0] is not None, "no tick made"
            return row[0]

    def add_tables(self, *names: str, **opts) -> None:
        for cfg, dsn, extra in (
            (self.root_cfg, self.root_dsn, {}),
            (self.leaf_cfg, self.leaf_dsn, opts),
        ):
            with psycopg.connect(dsn) as conn:
                tableops.add_tables(cfg, conn, list(names), tableops.AddTableOptions(**extra))

    def worker(self, **settings: str) -> Worker:
        """A fresh leaf worker; earlier ones are disconnected (their process is gone)."""
        for old in self.workers:
            old.cancel_copies()
            old.conns.close()
        cfg = self.leaf_cfg
        if settings:
            cfg = Config(cfg.path, cfg.section, {**cfg.values, **settings})
        w = Worker(cfg)
        self.workers.append(w)
        return w

    def root_worker(self) -> Worker:
        w = Worker(self.root_cfg)
        self.workers.append(w)
        return w

    def last_tick(self, dsn: str | None = None) -> int | None:
        rows = self.sql(
            dsn or self.leaf_dsn,
            "select last_tick_id from ferry_node.local_state where queue_name = %s",
            (self.queue,),
        )
        return rows[0][0] if rows else None

    def catch_up(self, worker: Worker | None = None, timeout: float = 60) -> Worker:
        """Tick the root, then run the worker until the leaf holds that tick and every
        table is ok (copies run beside the loop: wait for them, polling)."""
        worker = worker or self._default or self.worker()
        self._default = worker
        target = self.tick()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not worker.work():
                time.sleep(0.02)  # a copy runs in the background, or nothing to do
            if self.last_tick() == target:
                if not self.states_pending():
                    return worker
                target = self.tick()  # the hand-over completes at a tick after the copy
        raise AssertionError(f"leaf did not reach tick {target}: at {self.last_tick()}")

    def states_pending(self) -> bool:
        rows = self.leaf(
            "select count(*) from ferry.table_info where queue_name = %s and local"
            " and merge_state is distinct from 'ok'",
            (self.queue,),
        )
        return rows[0][0] > 0

    def same(self, root_table: str, leaf_table: str | None = None, where: str = "true") -> None:
        q = "select t::text from {} as t where {} order by t.id"
        a = self.root(q.format(root_table, where))
        b = self.leaf(q.format(leaf_table or root_table, "true"))
        assert a == b


@pytest.fixture
def make_pair(db_a: str, db_b: str, tmp_path: Path) -> Iterator[Callable[..., Pair]]:
    made: list[Pair] = []

    def build(**leaf_settings: str) -> Pair:
        n = next(_names)
        queue = f"q{n}"
        root_cfg = write_ini(
            tmp_path / f"root{n}.ini", job_name=f"root{n}", db=db_a, queue_name=queue
        )
        leaf_cfg = write_ini(
            tmp_path / f"leaf{n}.ini",
            job_name=f"leaf{n}",
            db=db_b,
            queue_name=queue,
            loop_delay="0.1",
            exception_sleep="0.1",
            spark_master="local[2]",
            **leaf_settings,
        )
        setup.create_node(root_cfg, setup.build_request(root_cfg, "root", "rootnode", None, None))
        setup.create_node(leaf_cfg, setup.build_request(leaf_cfg, "leaf", "leafnode", None, db_a))
        pair = Pair(db_a, db_b, root_cfg, leaf_cfg, queue)
        made.append(pair)
        return pair

    yield build
    for pair in made:
        for w in pair.workers:
            w.conns.close()


@pytest.fixture
def ini() -> Callable[..., Config]:
    """``ini(path, key=value, ...)`` writes a [pgferry] config and loads it."""
    return write_ini


@pytest.fixture
def pair(make_pair) -> Pair:
    return make_pair()
