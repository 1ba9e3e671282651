"""A stopped ticker is noticed: events wait on the root and no tick comes for them.

``wait-root`` / ``wait-provider`` fail with one line naming the ticker, ``status`` shows it
on the root's line and exits 1, the workers log it once (and once when it ticks again) and
their metric says so.  With the ticker running, or with an idle queue (an old tick but no
event waiting), nothing is reported.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg import conninfo

from pgferry.apply.worker import Worker
from pgferry.config import load_config
from pgferry.metrics.worker import watch_worker
from pgferry.polling import wait_until
from pgferry.queue.ticker import TickerService, TickerSettings

STOPPED_AFTER = "1"  # seconds: the tests need not wait the default 10


def q(dsn: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def pair(db_a, db_b, write_ini, cli):
    """Root ``src`` and leaf ``dst`` with one table each, in sync; no ticker runs."""
    settings = {"ticker_stopped_after": STOPPED_AFTER, "loop_delay": "0.1"}
    root_ini = write_ini("src", db_a, **settings)
    leaf_ini = write_ini("dst", db_b, **settings)
    for dsn in (db_a, db_b):
        q(dsn, "create table public.t (id int primary key, v text)")
    assert cli(root_ini, "create-root", "src").code == 0
    assert cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0
    assert cli(root_ini, "add-table", "public.t").code == 0
    assert cli(leaf_ini, "add-table", "public.t", "--expect-sync").code == 0
    # Whatever add-table queued is ticked: from here on no event waits.
    q(db_a, "select ferry_queue.force_tick('replika')")
    q(db_a, "select ferry_queue.ticker('replika')")
    return root_ini, leaf_ini


def _waiting(dsn: str) -> int:
    return q(dsn, "select ev_new from ferry_queue.get_queue_info('replika')")[0][0]


def _status(cli, ini) -> dict:
    return json.loads(cli(ini, "status", "--json").out)


def test_stopped_ticker_named_by_waits_status_and_worker(db_a, db_b, pair, cli, capsys) -> None:
    root_ini, leaf_ini = pair
    # A second table waits for its copy on the leaf (no worker runs): wait-sync has work.
    for dsn in (db_a, db_b):
        q(dsn, "create table public.t2 (id int primary key)")
    assert cli(root_ini, "add-table", "public.t2").code == 0
    assert cli(leaf_ini, "add-table", "public.t2").code == 0
    q(db_a, "select ferry_queue.force_tick('replika')")
    q(db_a, "select ferry_queue.ticker('replika')")
    q(db_a, "insert into public.t select g, 'x' from generate_series(1, 3) g")
    assert _waiting(db_a) == 3
    wait_until(
        lambda: _status(cli, leaf_ini)["problems"], timeout=30, interval=0.2, what="the alarm"
    )

    for command in ("wait-root", "wait-provider"):
        res = cli(leaf_ini, command, "--timeout=5", "--poll=0.1")
        assert res.code == 1, res
        last = res.err.strip().splitlines()[-1]
        assert last.startswith("pgferry: The ticker of root src has not ticked for "), last
        assert last.endswith("s while 3 events wait: is `pgferry pgqd.ini ticker` running?")
        assert "applied tick" not in res.out
    res = cli(root_ini, "wait-root", "--timeout=5")
    assert res.code == 1 and "The ticker of root src has not ticked" in res.err
    res = cli(leaf_ini, "wait-sync", "--timeout=30")
    assert res.code == 1 and "1/2 table(s) to copy" in res.err
    assert (
        res.err.strip()
        .splitlines()[-1]
        .startswith("pgferry: The ticker of root src has not ticked for ")
    )

    res = cli(leaf_ini, "status")
    assert res.code == 1
    lines = res.out.splitlines()
    root_line = next(i for i, line in enumerate(lines) if line.startswith("src (root)"))
    stopped = [line for line in lines if "TICKER STOPPED" in line]
    assert len(stopped) == 1 and lines.index(stopped[0]) > root_line
    assert "the root's ticker has not ticked for" in stopped[0]
    assert "while 3 events wait" in stopped[0]
    assert res.err.strip().splitlines()[-1] == "pgferry: status: ticker of root src stopped"
    data = _status(cli, leaf_ini)
    root = next(n for n in data["nodes"] if n["name"] == "src")
    assert root["events_waiting"] == 3 and root["ticker_stopped"]

    # The workers: one warning, however many loops; the metric says 1; a tick clears both.
    # (The commands above set up logging to stderr, as the worker command does.)
    capsys.readouterr()
    for ini in (root_ini, leaf_ini):
        worker = Worker(load_config(ini))
        registry = CollectorRegistry()
        watch_worker(registry, worker)
        try:
            for _ in range(3):
                worker.ticker_watch._looked_at = float("-inf")  # look at every loop
                worker.work()
            assert (
                registry.get_sample_value(
                    "pgferry_root_ticker_stopped", {"queue": "replika", "node": worker_node(ini)}
                )
                == 1
            )
        finally:
            worker.shutdown()
    warnings = [line for line in capsys.readouterr().err.splitlines() if " WARNING " in line]
    assert len(warnings) == 2, warnings  # one per worker
    assert all("WARNING The root's ticker has not ticked for" in w for w in warnings)

    worker = Worker(load_config(leaf_ini))
    try:
        for _ in range(2):  # the first loop learns where the root's queue is
            worker.ticker_watch._looked_at = float("-inf")
            worker.work()
        assert worker.ticker_watch.stalled is True
        capsys.readouterr()
        q(db_a, "select ferry_queue.ticker('replika')")  # the ticker is back
        worker.ticker_watch._looked_at = float("-inf")
        worker.work()
        assert worker.ticker_watch.stalled is False
        assert "INFO The root's ticker ticks again (tick " in capsys.readouterr().err
    finally:
        worker.shutdown()
    res = cli(leaf_ini, "status")
    assert res.code == 0 and "TICKER" not in res.out, res


def worker_node(ini) -> str:
    return "src" if ini.stem == "src" else "dst"


def test_idle_queue_and_running_ticker_raise_no_alarm(db_a, db_b, pg_a, pair, cli) -> None:
    root_ini, leaf_ini = pair
    with leaf_worker(leaf_ini):
        # Idle: the newest tick is older than ticker_stopped_after, but no event waits.
        q(db_a, "select pg_sleep(1.2)")
        assert _waiting(db_a) == 0
        res = cli(leaf_ini, "status")
        assert res.code == 0 and "TICKER" not in res.out, res
        tick = q(db_a, "select last_tick_id from ferry_queue.get_queue_info('replika')")[0][0]
        res = cli(leaf_ini, "wait-root", "--timeout=30", "--poll=0.1")
        assert res.code == 0 and f"has applied tick {tick} of src" in res.out, res

    # The ticker runs: wait-root waits for the tick that takes the new rows, then for the
    # leaf to apply it.
    with ticker(db_a), leaf_worker(leaf_ini):
        q(db_a, "insert into public.t select g, 'y' from generate_series(1, 5) g")
        res = cli(leaf_ini, "wait-root", "--timeout=60", "--poll=0.1")
        assert res.code == 0, res.err
        assert q(db_b, "select count(*) from public.t") == [(5,)]
        res = cli(root_ini, "status")
        assert res.code == 0 and "TICKER" not in res.out, res


def test_wait_root_waits_for_a_commit_its_newest_tick_missed(db_a, db_b, pair, cli) -> None:
    root_ini, leaf_ini = pair
    # A transaction takes its event ids, a tick is made while it runs, then it commits: the
    # tick's event position counts its events, the tick's snapshot does not see them.
    with psycopg.connect(db_a) as writer:
        writer.execute("insert into public.t select g, 'late' from generate_series(1, 4) g")
        q(db_a, "select ferry_queue.force_tick('replika')")
        tick = q(db_a, "select ferry_queue.ticker('replika')")[0][0]
        writer.commit()
    assert _waiting(db_a) == 0
    with leaf_worker(leaf_ini):
        # No ticker runs: the leaf applies that tick, which lacks the rows; the wait must not
        # report it as the end of the root's events.
        applied = "select coalesce(max(last_tick_id), 0) from ferry_node.local_state"
        wait_until(
            lambda: q(db_b, applied)[0][0] >= tick, timeout=30, interval=0.1, what="the tick"
        )
        res = cli(leaf_ini, "wait-root", "--timeout=3", "--poll=0.1")
        assert res.code == 1, res
        assert "while 4 events wait" in res.err, res.err
        with ticker(db_a):
            res = cli(leaf_ini, "wait-root", "--timeout=60", "--poll=0.1")
            assert res.code == 0, res.err
            assert q(db_b, "select count(*) from public.t where v = 'late'") == [(4,)]


@contextmanager
def ticker(dsn: str) -> Iterator[None]:
    params = conninfo.conninfo_to_dict(dsn)
    database = str(params.pop("dbname"))
    service = TickerService(
        TickerSettings(
            base_connstr=conninfo.make_conninfo(**params),
            database_list=[database],
            ticker_period=0.1,
        )
    )
    with _running(service):
        yield


@contextmanager
def leaf_worker(ini) -> Iterator[None]:
    with _running(Worker(load_config(ini))):
        yield


@contextmanager
def _running(service) -> Iterator[None]:
    thread = threading.Thread(target=service.run_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        service.stopping = True
        thread.join(timeout=60)
        assert not thread.is_alive()
