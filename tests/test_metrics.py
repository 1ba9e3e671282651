"""Prometheus metrics: the worker's and the ticker's /metrics scraped over HTTP while they
run, the settings, and a port already taken refusing the start with one line."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from psycopg import conninfo

from pgferry import schema
from pgferry.cli.ini_template import template_for
from pgferry.config import load_config
from pgferry.daemon import Service
from pgferry.errors import ConfigError, PgferryError
from pgferry.metrics.endpoint import Endpoint, endpoint
from pgferry.metrics.server import MetricsServer
from pgferry.metrics.ticker import watch_ticker
from pgferry.metrics.worker import NodeReading, WorkerCollector, read_node, watch_worker
from pgferry.node.ticker_health import StallLog
from pgferry.settings import NODE_SETTINGS, TICKER_SETTINGS
from pgferry.testing.cluster import LocalCluster, free_port
from pgferry.testing.scenario import wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def wait_for(check: Callable[[], object], timeout: float = 60, what: str = "condition") -> object:
    return wait_until(check, timeout, what)


@contextmanager
def running(service: Service) -> Iterator[threading.Thread]:
    """The service's loop in a thread, stopped (and shut down) at the end of the block."""
    thread = threading.Thread(target=service.run_forever, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        service.stopping = True
        thread.join(timeout=60)
        assert not thread.is_alive()


def sql(dsn: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def tick(dsn: str, queue: str = "replika") -> int:
    sql(dsn, "select ferry_queue.force_tick(%s)", (queue,))
    return sql(dsn, "select ferry_queue.ticker(%s)", (queue,))[0][0]


def make_cascade(db_a: str, db_b: str, write_ini, cli, **leaf: str) -> tuple[Path, Path]:
    """Root and leaf replicating table t (the leaf's copy is skipped: both start empty)."""
    for dsn in (db_a, db_b):
        sql(dsn, "create table t (id int primary key, v text)")
    root_ini = write_ini("src", db_a)
    leaf_ini = write_ini(
        "dst", db_b, spark_warm="false", loop_delay="0.05", exception_sleep="0.2", **leaf
    )
    assert cli(root_ini, "create-root", "src").code == 0
    assert cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0
    assert cli(root_ini, "add-table", "t").code == 0
    assert cli(leaf_ini, "add-table", "t", "--expect-sync").code == 0
    return root_ini, leaf_ini


# --- settings -----------------------------------------------------------------------------
def test_settings_listed_and_checked(tmp_path: Path) -> None:
    for settings in (NODE_SETTINGS, TICKER_SETTINGS):
        keys = {s.key: s.default_text for s in settings}
        assert keys["metrics_port"] == "" and keys["metrics_address"] == "127.0.0.1"
    assert "#metrics_port = " in template_for(None)

    path = tmp_path / "n.ini"
    path.write_text("[pgferry]\ndb = dbname=x\nqueue_name = q\n")
    assert endpoint(load_config(path)) is None  # off by default
    on = load_config(path, overrides={"metrics_port": "9187"})
    assert endpoint(on) == Endpoint("127.0.0.1", 9187)
    for bad in ("x", "0", "70000"):
        with pytest.raises(ConfigError, match="'metrics_port' must be a port number"):
            endpoint(load_config(path, overrides={"metrics_port": bad}))


def test_registries_per_process_are_separate() -> None:
    first = MetricsServer(Endpoint("127.0.0.1", free_port()))
    second = MetricsServer(Endpoint("127.0.0.1", free_port()))
    try:
        assert first.registry is not second.registry
        with pytest.raises(PgferryError, match=f"127.0.0.1:{first.port}"):
            MetricsServer(Endpoint("127.0.0.1", first.port))
        assert scrape(first.port) == {}
    finally:
        first.close()
        second.close()


# --- the worker ---------------------------------------------------------------------------
def test_worker_metrics_move_under_load(db_a, db_b, write_ini, cli) -> None:
    from pgferry.apply.worker import Worker

    _, leaf_ini = make_cascade(db_a, db_b, write_ini, cli)
    port = free_port()
    config = load_config(leaf_ini, overrides={"metrics_port": str(port)})
    where = endpoint(config)
    assert where is not None
    server = MetricsServer(where)
    worker = Worker(config)
    watch_worker(server.registry, worker)
    labels = {"queue": "replika", "node": "dst"}

    def leaf_tick() -> int | None:
        return sql(db_b, "select last_tick_id from ferry_node.local_state")[0][0]

    try:
        with running(worker):
            target = tick(db_a)
            wait_for(lambda: leaf_tick() == target, what="first tick applied")
            before = scrape(port)
            assert value(before, "pgferry_node_database_up", **labels) == 1
            assert value(before, "pgferry_last_tick_id", **labels) == target
            for round_no in range(3):
                sql(
                    db_a,
                    "insert into t select g, 'v' from generate_series(%s::int, %s::int) g",
                    (round_no * 100 + 1, round_no * 100 + 100),
                )
                target = tick(db_a)
                wait_for(lambda t=target: leaf_tick() == t, what=f"tick {target} applied")
            applied_before = value(before, "pgferry_events_applied_total", **labels)

            def counted() -> Samples | None:
                # The tick is committed before the worker counts the batch: wait for both.
                got = scrape(port)
                events = value(got, "pgferry_events_applied_total", **labels)
                observed = value(got, "pgferry_batch_duration_seconds_count", **labels)
                batches = value(got, "pgferry_batches_total", **labels)
                done = events >= applied_before + 300 and observed == batches
                return got if done else None

            after = wait_for(counted, what="the batches counted")
    finally:
        server.close()

    assert sql(db_b, "select count(*) from t") == [(300,)]
    grew = ("pgferry_batches_total", "pgferry_batch_duration_seconds_count")
    for name in grew:
        assert value(after, name, **labels) > value(before, name, **labels), name
    assert value(after, "pgferry_batch_duration_seconds_sum", **labels) > 0
    assert value(after, "pgferry_batch_duration_seconds_bucket", le="+Inf", **labels) == (
        value(after, "pgferry_batches_total", **labels)
    )
    assert value(after, "pgferry_last_tick_id", **labels) == target
    assert value(after, "pgferry_last_tick_id", **labels) > value(
        before, "pgferry_last_tick_id", **labels
    )
    lag = value(after, "pgferry_consumer_lag_seconds", **labels)
    assert isinstance(lag, float) and 0 <= lag < 60
    assert value(after, "pgferry_errors_total", **labels) == 0
    assert value(after, "pgferry_node_error", **labels) == 0
    assert value(after, "pgferry_table_state", table="public.t", state="ok", **labels) == 1
    for other in ("pending", "in-copy", "catching-up"):
        assert value(after, "pgferry_table_state", table="public.t", state=other) == 0

    # A copy into the node shows in its bookkeeping, named like the table.
    with psycopg.connect(db_b, autocommit=True) as conn:
        schema.install(conn, ("copy",))
        conn.execute(
            "insert into ferry_copy.range_done (copy_id, dest_table, range_no, rows)"
            " values ('c1', 'public.t', 1, 40), ('c1', 'public.t', 2, 2)"
        )
        reading = read_node(conn, "replika")
    assert reading is not None and reading.node_type == "leaf"
    assert reading.copy_rows == {("c1", "public.t"): 42}


class _FakeWorker:
    """What the collector reads of a worker."""

    def __init__(self, config) -> None:
        from pgferry.apply.worker_settings import WorkerSettings

        self.config = config
        self.settings = WorkerSettings.from_config(config)
        self.batches_applied = self.spark_batches = self.events_applied = 0
        self.errors_total = 0
        self.batch_observers: list = []
        self.ticker_watch = StallLog(10.0)  # never looked: no ticker metric


def test_worker_collector_states_copies_and_database_down(tmp_path: Path) -> None:
    path = tmp_path / "n1.ini"
    path.write_text("[pgferry]\ndb = dbname=x\nqueue_name = q\nnode_name = n1\n")
    worker = _FakeWorker(load_config(path))
    readings: list[NodeReading | None] = []
    collector = WorkerCollector(worker, read=lambda _w: readings.pop(0))  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(collector)

    def collect(reading: NodeReading | None) -> Samples:
        readings.append(reading)
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in registry.collect()
            for s in family.samples
        }

    # The database cannot be read: the counters are there under the configured name.
    down = collect(None)
    assert value(down, "pgferry_node_database_up", node="n1") == 0
    assert value(down, "pgferry_batches_total", node="n1") == 0
    assert value(down, "pgferry_consumer_lag_seconds") is None
    assert value(down, "pgferry_root_ticker_stopped") is None

    for observe in worker.batch_observers:
        observe(None, None, 0.02)
    reading = NodeReading(
        "leafnode",
        "leaf",
        last_tick_id=7,
        lag_seconds=1.5,
        tables={"public.a": "in-copy", "public.b": "pending"},
        copy_rows={("c1", "public.a"): 100},
    )
    first = collect(reading)
    assert value(first, "pgferry_batch_duration_seconds_count", node="leafnode") == 1
    assert value(first, "pgferry_batch_duration_seconds_bucket", le="0.025") == 1
    assert value(first, "pgferry_batch_duration_seconds_bucket", le="0.01") == 0
    assert value(first, "pgferry_table_state", table="public.a", state="in-copy") == 1
    assert value(first, "pgferry_table_state", table="public.a", state="ok") == 0
    assert value(first, "pgferry_table_state", table="public.b", state="pending") == 1
    assert value(first, "pgferry_copy_rows_total", table="public.a") == 100

    # The copy goes on, then finishes (its bookkeeping is removed), then another starts.
    reading.copy_rows = {("c1", "public.a"): 250}
    assert value(collect(reading), "pgferry_copy_rows_total", table="public.a") == 250
    reading.copy_rows = {}
    reading.tables = {"public.a": "catching-up", "public.b": "in-copy"}
    done = collect(reading)
    assert value(done, "pgferry_copy_rows_total", table="public.a") == 250
    assert value(done, "pgferry_table_state", table="public.a", state="catching-up") == 1
    reading.copy_rows = {("c2", "public.b"): 5}
    later = collect(reading)
    assert value(later, "pgferry_copy_rows_total", table="public.a") == 250
    assert value(later, "pgferry_copy_rows_total", table="public.b") == 5


# --- the ticker ---------------------------------------------------------------------------
def test_ticker_metrics(pg_a: LocalCluster, db_a: str) -> None:
    from pgferry.queue.ticker import TickerService, TickerSettings

    with psycopg.connect(db_a, autocommit=True) as conn:
        schema.install(conn, ("queue",))
        for queue in ("busy", "held"):
            conn.execute("select ferry_queue.create_queue(%s)", (queue,))
        conn.execute("select ferry_queue.set_queue_config('busy', 'ticker_max_lag', '0.1 s')")
        conn.execute("select ferry_queue.set_queue_config('busy', 'ticker_idle_period', '0.2 s')")
        conn.execute("select ferry_queue.set_queue_config('held', 'ticker_paused', 'true')")
        for n in range(3):
            conn.execute("select ferry_queue.insert_event('held', 'x', %s)", (str(n),))
    params = conninfo.conninfo_to_dict(db_a)
    database = str(params.pop("dbname"))
    plain, missing = f"{database}_plain", f"{database}_missing"
    pg_a.createdb(plain)  # no queue schema: watched, not shown
    settings = TickerSettings(
        base_connstr=conninfo.make_conninfo(**params),
        database_list=[database, plain, missing],
        ticker_period=0.1,
        check_period=0.5,
    )
    service = TickerService(settings)
    server = MetricsServer(Endpoint("127.0.0.1", free_port()))
    watch_ticker(server.registry, service)
    try:
        with running(service):
            first = wait_for(
                lambda: (
                    value(s := scrape(server.port), "pgferry_ticks_total", database=database) and s
                ),
                what="first ticks",
            )
            sql(db_a, "select ferry_queue.insert_event('busy', 'x', 'y')")
            ticks = value(first, "pgferry_ticks_total", database=database)
            later = wait_for(
                lambda: (
                    (
                        value(s := scrape(server.port), "pgferry_ticks_total", database=database)
                        > ticks + 2
                    )
                    and s
                ),
                what="more ticks",
            )
    finally:
        server.close()
    assert isinstance(later, dict)
    assert value(later, "pgferry_ticker_databases") == 1
    assert value(later, "pgferry_queue_events_pending", database=database, queue="held") == 3
    busy_tick = value(later, "pgferry_queue_last_tick_id", database=database, queue="busy")
    assert busy_tick is not None and busy_tick > 1
    assert value(later, "pgferry_queue_ticker_lag_seconds", queue="busy") < 30
    assert value(later, "pgferry_ticker_errors_total", database=database) == 0
    assert value(later, "pgferry_ticker_errors_total", database=missing) >= 1
    assert value(later, "pgferry_ticks_total", database=plain) is None


# --- the command line ---------------------------------------------------------------------
def pgferry(*args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pgferry", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_port_in_use_refuses_the_start(db_a, db_b, write_ini, cli, tmp_path: Path) -> None:
    root_ini, leaf_ini = make_cascade(db_a, db_b, write_ini, cli)
    pidfile = tmp_path / "pid" / "dst.pid"
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        for switches in ([], ["-d"]):
            res = pgferry(*switches, "--set", f"metrics_port={port}", leaf_ini, "worker")
            lines = res.stderr.strip().splitlines()
            assert res.returncode != 0, res
            assert len(lines) == 1, res.stderr
            assert lines[0].startswith(f"pgferry: cannot serve metrics on 127.0.0.1:{port}")
            assert "Traceback" not in res.stderr
            assert not pidfile.exists()
        ticker_ini = tmp_path / "pgqd.ini"
        ticker_ini.write_text(f"[pgqd]\nbase_connstr = host=127.0.0.1\nmetrics_port = {port}\n")
        res = pgferry(ticker_ini, "ticker")
        assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert res.stderr.startswith(f"pgferry: cannot serve metrics on 127.0.0.1:{port}")
    finally:
        taken.close()
    # The worker never took the node: no lock, no error recorded.
    locks = sql(
        db_b,
        "select count(*) from pg_locks where locktype = 'advisory'"
        " and database = (select oid from pg_database where datname = current_database())",
    )
    assert locks == [(0,)]
    assert sql(db_b, "select cur_error from ferry_node.local_state") == [(None,)]

    # With the port free, the detached worker serves its metrics.
    started = pgferry("-d", "--set", f"metrics_port={port}", leaf_ini, "worker")
    assert started.returncode == 0, started.stderr
    try:
        sql(db_a, "insert into t values (1, 'one')")
        target = tick(db_a)
        wait_for(
            lambda: value(scrape_or_empty(port), "pgferry_last_tick_id", node="dst") == target,
            what="the daemon's metrics",
        )
        wait_for(
            lambda: value(scrape(port), "pgferry_events_applied_total", node="dst") == 1,
            what="the event counted",
        )
    finally:
        pgferry("-k", leaf_ini, "worker")
        wait_for(lambda: not pidfile.exists(), what="the worker to stop")


def scrape_or_empty(port: int) -> Samples:
    try:
        return scrape(port)
    except OSError:
        return {}
