"""Cascades built in-process for tests and benchmarks: nodes, their workers, ticks.

A :class:`Cascade` is one queue's nodes, each a database named by the caller, made with the
real admin code (``setup.create_node``, ``tableops.add_tables``) from an ini file it writes.
The workers run in this process: stepped one loop at a time by :meth:`Cascade.catch_up`
(deterministic, no threads), or looping in threads as the daemon would (:meth:`start`, a
:class:`Runner` per node, with a :class:`Ticker` standing in for the ticker daemon).
Everything waits by polling a condition, never by a fixed sleep.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from pgferry import polling
from pgferry.apply.worker import Worker
from pgferry.config import Config, load_config
from pgferry.errors import WaitTimeout
from pgferry.node import setup, tableops
from pgferry.testing.commands import Result, run_cli

# What a test node's worker does unless told otherwise: a short loop and retry pause.
NODE_DEFAULTS = {"loop_delay": "0.1", "exception_sleep": "0.1", "spark_master": "local[2]"}


def write_ini(path: Path, section: str = "pgferry", **values: str) -> Path:
    """An ini file of one ``[section]`` with ``values``."""
    path.write_text(f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    return path


def sql_rows(dsn: str, query, params=None) -> list[tuple]:
    """Run one statement in autocommit; its rows (none for a statement without)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


class Runner(threading.Thread):
    """One node's worker loop, as the daemon runs it, until stopped."""

    def __init__(self, config: Config) -> None:
        super().__init__(daemon=True)
        self.worker = Worker(config)
        self.halt = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                if not self.worker.work():
                    self.halt.wait(0.1)
            except Exception as exc:  # the daemon records and retries the same way
                self.errors.append(str(exc))
                with contextlib.suppress(Exception):
                    self.worker.on_error(exc)
                self.halt.wait(0.2)
        self.worker.shutdown()

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)


class Ticker(threading.Thread):
    """Ticks whichever node holds the root queue (external-ticker queues are skipped)."""

    def __init__(self, dsns: list[str], queue: str, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.dsns, self.queue, self.every = dsns, queue, every
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.every):
            for dsn in self.dsns:
                try:
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        conn.execute(
                            "select ferry_queue.force_tick(queue_name) from ferry_queue.queue"
                            " where queue_name = %s and not queue_external_ticker",
                            (self.queue,),
                        )
                        conn.execute("select ferry_queue.ticker()")
                except psycopg.Error:
                    pass  # a node being dropped or stopped

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)


@dataclass
class Cascade:
    """One queue's nodes.  ``settings`` go into every node's ini after ``defaults``;
    ``capture`` runs a command line (default :func:`run_cli`)."""

    queue: str
    workdir: Path
    settings: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=lambda: dict(NODE_DEFAULTS))
    section: str = "pgferry"
    capture: Callable[[list[str]], Result] = run_cli
    dsns: dict[str, str] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)
    runners: dict[str, Runner] = field(default_factory=dict)
    ticker: Ticker | None = None

    # --- nodes --------------------------------------------------------------------------
    def node(
        self, name: str, dsn: str, node_type: str, provider: str | None = None, **settings: str
    ) -> Config:
        """Make ``dsn`` the node ``name`` under ``provider`` (a node of this cascade).

        ``settings`` add to or override the ini values (``job_name`` too: by default
        ``<queue>_<name>``); the ini file is ``<job_name>.ini`` in the work folder.
        """
        values = {
            "job_name": f"{self.queue}_{name}",
            "db": dsn,
            "queue_name": self.queue,
            **self.defaults,
            **self.settings,
            **settings,
        }
        path = write_ini(self.workdir / f"{values['job_name']}.ini", self.section, **values)
        self.dsns[name], self.paths[name] = dsn, path
        cfg = self.config(name)
        provider_dsn = self.dsns[provider] if provider else None
        setup.create_node(cfg, setup.build_request(cfg, node_type, name, None, provider_dsn))
        return cfg

    def config(self, name: str) -> Config:
        return load_config(self.paths[name])

    def sql(self, name: str, query, params=None) -> list[tuple]:
        return sql_rows(self.dsns[name], query, params)

    def add(self, name: str, *tables: str, **opts) -> list[str]:
        """``add-table`` of ``tables`` on the node (``opts``: :class:`AddTableOptions`)."""
        with psycopg.connect(self.dsns[name]) as conn:
            return tableops.add_tables(
                self.config(name), conn, list(tables), tableops.AddTableOptions(**opts)
            )

    def cli(self, name: str, *args: object) -> Result:
        """``pgferry <node's ini> ARGS`` in this process."""
        return self.capture([str(self.paths[name]), *map(str, args)])

    def node_type(self, name: str) -> str | None:
        found = self.sql(name, "select node_type from ferry_node.node_info")
        return found[0][0] if found else None

    def root(self) -> str:
        """The node that is root now (a takeover moves it)."""
        roots = [n for n in self.dsns if self._alive(n) and self.node_type(n) == "root"]
        assert len(roots) == 1, roots
        return roots[0]

    def _alive(self, name: str) -> bool:
        try:
            found = self.sql(name, "select to_regclass('ferry_node.node_info') is not null")
        except psycopg.OperationalError:
            return False  # a database made unreachable on purpose
        return bool(found[0][0])

    # --- ticks and positions ------------------------------------------------------------
    def tick(self) -> int:
        """A tick on the root now; its id (or the one a copy or ticker made first)."""
        with psycopg.connect(self.dsns[self.root()], autocommit=True) as conn:
            conn.execute("select ferry_queue.force_tick(%s)", (self.queue,))
            conn.execute("select ferry_queue.ticker(%s)", (self.queue,))
            row = conn.execute(
                "select last_tick_id from ferry_queue.get_queue_info(%s)", (self.queue,)
            ).fetchone()
        assert row and row[0] is not None, "no tick made"
        return row[0]

    def last_tick(self, name: str) -> int | None:
        rows = self.sql(
            name,
            "select last_tick_id from ferry_node.local_state where queue_name = %s",
            (self.queue,),
        )
        return rows[0][0] if rows else None

    def pending(self, name: str) -> int:
        """The node's tables not yet ok (being copied or catching up)."""
        rows = self.sql(
            name,
            "select count(*) from ferry.table_info where queue_name = %s and local"
            " and merge_state is distinct from 'ok'",
            (self.queue,),
        )
        return rows[0][0]

    def wait_for(self, cond: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
        """Poll ``cond`` until true; on timeout name ``what`` and the workers' last errors."""
        try:
            polling.wait_until(cond, timeout=timeout, what=what)
        except WaitTimeout:
            errors = {n: r.errors[-3:] for n, r in self.runners.items() if r.errors}
            raise AssertionError(f"timed out waiting for {what}; worker errors: {errors}") from None

    # --- workers stepped in this thread -------------------------------------------------
    def worker(self, name: str) -> Worker:
        if name not in self.workers:
            self.workers[name] = Worker(self.config(name))
        return self.workers[name]

    def catch_up(self, *names: str, timeout: float = 120, tables_ok: bool = True) -> int:
        """Tick the root and wait until the named nodes (default: every running one but
        the root) hold that tick; returns it.  A node without a :class:`Runner` has its
        worker stepped here.  ``tables_ok``: also every table ok (copies run beside the
        loop: a new tick after they finish)."""
        names = names or tuple(n for n in self.runners if self.node_type(n) != "root")
        target = self.tick()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = [self.worker(n).work() for n in names if n not in self.runners]
            at = all((self.last_tick(n) or 0) >= target for n in names)
            if at and (not tables_ok or not any(self.pending(n) for n in names)):
                return target
            if at:
                target = self.tick()  # a copy still runs: its hand-over needs a later tick
            if not any(busy):  # nothing stepped did work: a copy or the runners go on
                time.sleep(0.02 if busy else 0.1)
        errors = {n: r.errors[-3:] for n, r in self.runners.items() if r.errors}
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
        raise AssertionError(
            f"{names} did not reach tick {target}: {states}; worker errors: {errors}"
        )

    @contextlib.contextmanager
    def running(self, *names: str, every: float = 0.3) -> Iterator[list[Worker]]:
        """The named workers looping in threads and the root ticking every ``every``
        seconds, for commands that wait on a worker (compare, repair); yields the workers."""
        stop = threading.Event()
        root = self.dsns[self.root()]

        def tick() -> None:
            with psycopg.connect(root, autocommit=True) as conn:
                while not stop.wait(every):
                    conn.execute("select ferry_queue.force_tick(%s)", (self.queue,))
                    conn.execute("select ferry_queue.ticker(%s)", (self.queue,))

        workers = [self.worker(n) for n in names]
        threads = [threading.Thread(target=tick)]
        threads += [threading.Thread(target=w.run_forever) for w in workers]
        for t in threads:
            t.start()
        try:
            yield workers
        finally:
            stop.set()
            for w in workers:
                w.stopping = True
            for t in threads:
                t.join(timeout=60)
            for n in names:
                self.workers.pop(n, None)  # shut down: catch_up makes new ones

    # --- workers in threads, as daemons -------------------------------------------------
    def start(self, *names: str) -> None:
        for name in names:
            runner = Runner(self.config(name))
            self.runners[name] = runner
            runner.start()

    def stop(self, *names: str) -> None:
        for name in names or tuple(self.runners):
            runner = self.runners.pop(name, None)
            if runner is not None:
                runner.stop()

    def start_ticker(self) -> None:
        self.ticker = Ticker(list(self.dsns.values()), self.queue)
        self.ticker.start()

    def stop_ticker(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None

    def close(self) -> None:
        """Stop the threads and close every worker's connections."""
        self.stop_ticker()
        self.stop()
        for w in self.workers.values():
            w.cancel_copies()
            w.conns.close()
