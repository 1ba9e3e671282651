"""A root and any subscribers under it, each in a fresh database, driven in-process.

``cascade`` builds the nodes with the real admin code; each node's worker runs in this
process (so handler modules on ``sys.path`` serve it), and :meth:`Cascade.catch_up` ticks
the root and polls until every named node holds that tick with all tables ok.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from pgferry.apply.worker import Worker
from pgferry.cli.main import main
from pgferry.config import Config, load_config
from pgferry.node import setup, tableops

_queues = itertools.count(1)


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Cascade:
    queue: str
    tmp_path: Path
    capsys: pytest.CaptureFixture[str]
    settings: dict[str, str]
    dsns: dict[str, str] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)
    root: str = ""

    def node(self, name: str, dsn: str, node_type: str, provider: str | None = None) -> None:
        path = self.tmp_path / f"{self.queue}_{name}.ini"
        values = {
            "job_name": f"{self.queue}_{name}",
            "db": dsn,
            "queue_name": self.queue,
            "loop_delay": "0.1",
            "exception_sleep": "0.1",
            "spark_master": "local[2]",
            **self.settings,
        }
        path.write_text("[pgferry]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
        self.dsns[name], self.paths[name] = dsn, path
        cfg = self.config(name)
        provider_dsn = self.dsns[provider] if provider else None
        setup.create_node(cfg, setup.build_request(cfg, node_type, name, None, provider_dsn))
        if node_type == "root":
            self.root = name

    def config(self, name: str) -> Config:
        return load_config(self.paths[name])

    def sql(self, name: str, query, params=None) -> list[tuple]:
        with psycopg.connect(self.dsns[name], autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def add(self, name: str, *tables: str, **opts) -> list[str]:
        with psycopg.connect(self.dsns[name]) as conn:
            return tableops.add_tables(
                self.config(name), conn, list(tables), tableops.AddTableOptions(**opts)
            )

    def cli(self, name: str, *args: object) -> Result:
        self.capsys.readouterr()
        code = main([str(self.paths[name]), *map(str, args)])
        out = self.capsys.readouterr()
        return Result(code, out.out, out.err)

    def tick(self) -> int:
        with psycopg.connect(self.dsns[self.root], autocommit=True) as conn:
            conn.execute("select ferry_queue.force_tick(%s)", (self.queue,))
            conn.execute("select ferry_queue.ticker(%s)", (self.queue,))
            row = conn.execute(
                "select last_tick_id from ferry_queue.get_queue_info(%s)", (self.queue,)
            ).fetchone()
        assert row and row[0] is not None
        return row[0]

    def worker(self, name: str) -> Worker:
        if name not in self.workers:
            self.workers[name] = Worker(self.config(name))
        return self.workers[name]

    def _done(self, name: str, target: int) -> bool:
        rows = self.sql(
            name,
            "select last_tick_id, (select count(*) from ferry.table_info where queue_name = %s"
            " and local and merge_state is distinct from 'ok')"
            " from ferry_node.local_state where queue_name = %s",
            (self.queue, self.queue),
        )
        return bool(rows) and (rows[0][0] or 0) >= target and rows[0][1] == 0

    def catch_up(self, *names: str, timeout: float = 120) -> None:
        """Tick the root and run the named workers until each holds that tick with every
        table ok (copies run beside the loop: a new tick after they finish)."""
        target = self.tick()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name in names:
                self.worker(name).work()
            if all(self._done(n, target) for n in names):
                return
            if all((self._at(n) or 0) >= target for n in names):
                target = self.tick()  # a copy still runs: its hand-over needs a later tick
            time.sleep(0.05)
        states = {
            n: self.sql(
                n,
                "select table_name, merge_state, copy_error from ferry.table_info"
                " where queue_name = %s and local",
                (self.queue,),
            )
            + self.sql(n, "select last_tick_id, cur_error from ferry_node.local_state")
            for n in names
        }
        raise AssertionError(f"{names} did not reach tick {target}: {states}")

    def _at(self, name: str) -> int | None:
        rows = self.sql(
            name,
            "select last_tick_id from ferry_node.local_state where queue_name = %s",
            (self.queue,),
        )
        return rows[0][0] if rows else None

    @contextlib.contextmanager
    def running(self, *names: str) -> Iterator[None]:
        """The named workers looping in threads and the root ticking, for commands that
        wait on a worker (compare, repair)."""
        stop = threading.Event()

        def tick() -> None:
            with psycopg.connect(self.dsns[self.root], autocommit=True) as conn:
                while not stop.wait(0.3):
                    conn.execute("select ferry_queue.force_tick(%s)", (self.queue,))
                    conn.execute("select ferry_queue.ticker(%s)", (self.queue,))

        workers = [self.worker(n) for n in names]
        threads = [threading.Thread(target=tick)]
        threads += [threading.Thread(target=w.run_forever) for w in workers]
        for t in threads:
            t.start()
        try:
            yield
        finally:
            stop.set()
            for w in workers:
                w.stopping = True
            for t in threads:
                t.join(timeout=60)
            for n in names:
                self.workers.pop(n, None)  # shut down: catch_up makes new ones

    def close(self) -> None:
        for w in self.workers.values():
            w.cancel_copies()
            w.conns.close()


@pytest.fixture
def make_cascade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., Cascade]]:
    made: list[Cascade] = []

    def build(**settings: str) -> Cascade:
        cascade = Cascade(f"hq{next(_queues)}", tmp_path, capsys, settings)
        made.append(cascade)
        return cascade

    yield build
    for cascade in made:
        cascade.close()
