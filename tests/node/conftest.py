"""A cascade of four nodes on the two session clusters, workers running in threads.

``tree`` builds root -> branch -> leaf plus leaf2 under the root with the real admin code,
one table ``public."Tbl é"`` (mixed case, a space, unicode) registered everywhere (the
subscribers start in sync, so no copy is needed), and offers helpers: SQL on any node, a
tick on whichever node is root now, waiting until nodes have applied it, and the CLI.
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
from psycopg import sql

from pgferry.apply.worker import Worker
from pgferry.cli.main import main
from pgferry.config import Config, load_config
from pgferry.node import setup, tableops

TABLE = 'public."Tbl é"'
TABLE_ID = sql.Identifier("public", "Tbl é")
_queues = itertools.count(1)


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


class Writer(threading.Thread):
    """Inserts rows with new ids until stopped, on the first of ``dsns`` that accepts them.

    A refused write (a node that is not root denies it) moves on to the next database and
    retries the same id, as an application would after a switchover.
    """

    def __init__(self, dsns: list[str], first_id: int, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.dsns, self.next_id, self.every = dsns, first_id, every
        self.halt = threading.Event()
        self.refused = 0

    def run(self) -> None:
        query = sql.SQL("insert into {} values (%s, %s)").format(TABLE_ID)
        current = 0
        while not self.halt.wait(self.every):
            try:
                with psycopg.connect(self.dsns[current], autocommit=True) as conn:
                    while not self.halt.wait(self.every):
                        conn.execute(query, (self.next_id, f"w{self.next_id}"))
                        self.next_id += 1
            except psycopg.Error:
                self.refused += 1
                current = (current + 1) % len(self.dsns)

    def stop(self) -> int:
        self.halt.set()
        self.join(timeout=30)
        return self.next_id


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@dataclass
class Tree:
    queue: str
    dsns: dict[str, str]
    configs: dict[str, Path]
    capsys: pytest.CaptureFixture[str]
    tmp_path: Path
    runners: dict[str, Runner] = field(default_factory=dict)
    ticker: Ticker | None = None
    watermark_period: str = "3600"

    def add_node(self, node: str, dsn: str, node_type: str, provider: str | None) -> None:
        """Create the table on ``dsn``, make it a node and register the table (in sync)."""
        self.dsns[node] = dsn
        self.configs[node] = write_ini(
            self.tmp_path / f"{node}.ini",
            job_name=f"{self.queue}_{node}_job",
            db=dsn,
            queue_name=self.queue,
            loop_delay="0.1",
            exception_sleep="0.2",
            # The retention tests report watermarks themselves, at chosen moments.
            watermark_period=self.watermark_period,
        )
        cfg = load_config(self.configs[node])
        self.sql(node, sql.SQL("create table {} (id int primary key, v text)").format(TABLE_ID))
        provider_dsn = self.dsns[provider] if provider else None
        setup.create_node(cfg, setup.build_request(cfg, node_type, node, None, provider_dsn))
        with psycopg.connect(dsn) as conn:
            options = tableops.AddTableOptions(expect_sync=node_type != "root")
            tableops.add_tables(cfg, conn, [TABLE], options)

    @contextlib.contextmanager
    def gone(self, node: str) -> Iterator[None]:
        """The node's database disappears (renamed) for the block: as good as dead."""
        dbname = psycopg.conninfo.conninfo_to_dict(self.dsns[node])["dbname"]
        admin = self.dsns[node].replace(f"dbname={dbname}", "dbname=postgres")
        rename = sql.SQL("alter database {} rename to {}")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity where datname = %s",
                (dbname,),
            )
            conn.execute(rename.format(sql.Identifier(dbname), sql.Identifier(dbname + "_gone")))
        try:
            yield
        finally:
            self.stop()
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(
                    rename.format(sql.Identifier(dbname + "_gone"), sql.Identifier(dbname))
                )

    def sql(self, node: str, query, params=None) -> list[tuple]:
        with psycopg.connect(self.dsns[node], autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def cli(self, node: str, *args: object) -> CliResult:
        self.capsys.readouterr()
        code = main([str(self.configs[node]), *map(str, args)])
        captured = self.capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    def start(self, *nodes: str) -> None:
        for node in nodes:
            runner = Runner(load_config(self.configs[node]))
            self.runners[node] = runner
            runner.start()

    def start_ticker(self) -> None:
        self.ticker = Ticker(list(self.dsns.values()), self.queue)
        self.ticker.start()

    def stop_ticker(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None

    def log_applied(self, node: str) -> None:
        """Record every row change replay makes on ``node`` (to spot double application)."""
        self.sql(node, "create table applied_log (id int, op text)")
        self.sql(
            node,
            "create function log_applied() returns trigger language plpgsql as $$"
            " begin insert into applied_log values (new.id, tg_op); return null; end $$",
        )
        for query in (
            "create trigger log_applied after insert or update on {t}"
            " for each row execute function log_applied()",
            "alter table {t} enable always trigger log_applied",
        ):
            self.write(node, query)

    def applied_twice(self, node: str) -> list[tuple]:
        return self.sql(
            node, "select id, count(*) from applied_log group by id having count(*) > 1"
        )

    def stop(self, *nodes: str) -> None:
        for node in nodes or tuple(self.runners):
            runner = self.runners.pop(node, None)
            if runner is not None:
                runner.stop()

    def node_type(self, node: str) -> str | None:
        found = self.sql(node, "select node_type from ferry_node.node_info")
        return found[0][0] if found else None

    def provider(self, node: str) -> str | None:
        return self.sql(node, "select provider_node from ferry_node.local_state")[0][0]

    def root(self) -> str:
        roots = [n for n in self.dsns if self._alive(n) and self.node_type(n) == "root"]
        assert len(roots) == 1, roots
        return roots[0]

    def _alive(self, node: str) -> bool:
        try:
            found = self.sql(node, "select to_regclass('ferry_node.node_info') is not null")
        except psycopg.OperationalError:
            return False  # a database made unreachable on purpose
        return bool(found[0][0])

    def tick(self) -> int:
        root = self.root()
        self.sql(root, "select ferry_queue.force_tick(%s)", (self.queue,))
        tick = self.sql(root, "select ferry_queue.ticker(%s)", (self.queue,))[0][0]
        if tick is None:
            # A running ticker made the forced tick first.
            tick = self.sql(
                root, "select last_tick_id from ferry_queue.get_queue_info(%s)", (self.queue,)
            )[0][0]
        assert tick is not None
        return tick

    def last_tick(self, node: str) -> int | None:
        return self.sql(node, "select last_tick_id from ferry_node.local_state")[0][0]

    def wait_for(self, cond: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                errors = {n: r.errors[-3:] for n, r in self.runners.items() if r.errors}
                raise AssertionError(f"timed out waiting for {what}; worker errors: {errors}")
            time.sleep(0.1)

    def catch_up(self, *nodes: str, timeout: float = 60) -> int:
        """Tick the root and wait until ``nodes`` (default: every running one) applied it."""
        tick = self.tick()
        targets = nodes or tuple(n for n in self.runners if self.node_type(n) != "root")
        for node in targets:
            self.wait_for(
                lambda n=node: (self.last_tick(n) or 0) >= tick, timeout, f"{node} at {tick}"
            )
        return tick

    def rows(self, node: str) -> list[tuple]:
        query = sql.SQL("select id, v from {} order by id").format(TABLE_ID)
        return self.sql(node, query)

    def write(self, node: str, query: str, params=None) -> None:
        self.sql(node, sql.SQL(query).format(t=TABLE_ID), params)


def write_ini(path: Path, **values: str) -> Path:
    path.write_text("[londiste3]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    return path


@pytest.fixture
def tree(new_db_a, new_db_b, tmp_path: Path, capsys) -> Iterator[Tree]:
    t = Tree(f"casc{next(_queues)}", {}, {}, capsys, tmp_path)
    t.add_node("root", new_db_a(None), "root", None)
    t.add_node("branch", new_db_b(None), "branch", "root")
    t.add_node("leaf", new_db_b(None), "leaf", "branch")
    t.add_node("leaf2", new_db_a(None), "leaf", "root")
    try:
        yield t
    finally:
        t.stop_ticker()
        t.stop()
