"""Every daemon follows the primary: connect strings naming a primary and its streaming
standby with ``target_session_attrs=read-write``, the primary killed under load and the
standby promoted.

The provider's pair and the subscriber's pair each have a synchronous standby
(``synchronous_standby_names = '*'`` with ``synchronous_commit = on``): a commit the
application or the worker saw is on the standby, so after the promotion every table must
equal its source again with nothing lost.  The ticker, the worker (its provider, node and
lock connections), ``compare`` and ``status`` run through the command line, as daemons
where they are ones; ``status`` names the host that serves each node.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgferry.queue import ticks
from pgferry.stream.feed import Feed, FeedOptions
from pgferry.testing.cluster import LocalCluster, make_cluster
from pgferry.testing.commands import run_pgferry
from pgferry.testing.patroni import HaScenario, multi_host
from pgferry.testing.scenario import Load, sql, wait_until

# A commit on a primary waits for its standby: nothing a client saw is lost on failover.
SYNC = {"synchronous_commit": "on"}


def _standby_of(primary: LocalCluster) -> LocalCluster:
    """A streaming standby of ``primary`` (pg_basebackup -R), started, then made synchronous."""
    base = Path(tempfile.mkdtemp(prefix="pgferry-standby-"))
    os.chmod(base, 0o755)
    if os.geteuid() == 0:
        shutil.chown(base, user="postgres")
    standby = LocalCluster(base_dir=base, bindir=primary.bindir)
    standby._run(
        "pg_basebackup", "-D", str(standby.datadir), "-R", "-X", "stream", "-c", "fast",
        "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
    )  # fmt: skip
    with (standby.datadir / "postgresql.auto.conf").open("a") as fh:
        fh.write(f"port = {standby.port}\n")  # the last line of a setting wins
    standby.start()
    sql(primary.connstr(), "alter system set synchronous_standby_names = '*'")
    sql(primary.connstr(), "select pg_reload_conf()")
    wait_until(
        lambda: sql(primary.connstr(), "select sync_state from pg_stat_replication") == [("sync",)],
        60,
        "the standby streaming as synchronous",
    )
    return standby


def _fail_over(old: LocalCluster, new: LocalCluster) -> None:
    """The primary dies (no shutdown checkpoint, connections cut) and its standby takes over."""
    old.stop("immediate")
    new._run("pg_ctl", "-D", str(new.datadir), "-w", "-t", "60", "promote")


@pytest.fixture
def pairs() -> Iterator[tuple[LocalCluster, ...]]:
    made: list[LocalCluster] = []
    try:
        for name in ("ha-root", "ha-leaf"):
            primary = make_cluster(name, **SYNC)
            made.append(primary)
            made.append(_standby_of(primary))
        yield tuple(made)
    finally:
        for cluster in reversed(made):
            cluster.destroy()


def _serving(scenario: HaScenario, ini: str, node: str) -> str | None:
    """The host:port that ``status --json`` says serves ``node``."""
    _, report = scenario.status(ini)
    return next((n.get("server") for n in report["nodes"] if n["name"] == node), None)


def _under_load_across(scenario: HaScenario, load: Load, old: LocalCluster,
                       new: LocalCluster) -> None:  # fmt: skip
    """Fail ``old`` over to ``new`` while the leaf replays the load; the load goes on."""
    applied = scenario.leaf_tick()
    wait_until(lambda: scenario.leaf_tick() > applied, 60, "the leaf replaying the load")
    _fail_over(old, new)
    done = load.transactions
    wait_until(lambda: load.transactions >= done + 150, 90, "the load on the new primary")


@pytest.mark.slow
def test_daemons_follow_the_promoted_standby(pairs, tmp_path: Path) -> None:
    root_primary, root_standby, leaf_primary, leaf_standby = pairs
    scenario = HaScenario(
        root=multi_host(root_primary, root_standby), leaf=multi_host(leaf_primary, leaf_standby),
        workdir=tmp_path,
    )  # fmt: skip
    try:
        scenario.setup()
        scenario.wait_synced()
        scenario.wait_equal()
        root_at = f"127.0.0.1:{root_primary.port}"
        assert _serving(scenario, scenario.LEAF_INI, scenario.ROOT) == root_at

        # The provider's primary dies: ticker, worker, load and status move to its standby.
        with Load(scenario.src) as load:
            _under_load_across(scenario, load, root_primary, root_standby)
        scenario.wait_equal(timeout=120)
        moved = f"127.0.0.1:{root_standby.port}"
        wait_until(
            lambda: _serving(scenario, scenario.LEAF_INI, scenario.ROOT) == moved,
            30,
            "status naming the root's new server",
        )
        tree = scenario.cli(scenario.LEAF_INI, "status")
        assert f"Server: {moved}" in tree and "ERR:" not in tree
        wait_until(lambda: scenario.status(scenario.LEAF_INI)[0] == 0, 60, "status exit 0")
        # compare's sync point is taken on the new primary, and finds the leaf equal.
        out = scenario.cli(scenario.LEAF_INI, "compare")
        assert out.count("srcdb:") == 3 and "do not match" not in out, out

        # The subscriber's primary dies: the worker's node and lock connections move too.
        with Load(scenario.src) as load:
            _under_load_across(scenario, load, leaf_primary, leaf_standby)
        scenario.wait_equal(timeout=120)
        wait_until(
            lambda: (
                _serving(scenario, scenario.LEAF_INI, scenario.LEAF)
                == f"127.0.0.1:{leaf_standby.port}"
            ),
            30,
            "status naming the leaf's new server",
        )
        assert scenario.worker_running()
        wait_until(lambda: scenario.status(scenario.LEAF_INI)[0] == 0, 60, "status exit 0")
        assert "ERR:" not in scenario.cli(scenario.LEAF_INI, "status")
    finally:
        scenario.shutdown()


def _tick(dsn: str, queue: str) -> int:
    """One tick now, as the ticker would make it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ticks.force_tick(conn, queue)
        made = ticks.tick(conn, queue)
    assert made is not None
    return made


def test_change_feed_waits_for_the_promoted_standby(tmp_path: Path) -> None:
    """The feed's driver loses its provider in a failover: it waits for the new primary
    instead of failing the streaming query."""
    primary = make_cluster("feed-primary", **SYNC)
    standby = None
    try:
        standby = _standby_of(primary)
        base = multi_host(primary, standby)
        sql(f"{base} dbname=postgres", "create database feed")
        src = f"{base} dbname=feed"
        (tmp_path / "root.ini").write_text(
            f"[londiste3]\njob_name = feed_root\ndb = {src}\nqueue_name = q\n"
            f"logfile = {tmp_path}/root.log\npidfile = {tmp_path}/root.pid\n"
        )
        made = run_pgferry("root.ini", "create-root", "feed_root", src, cwd=tmp_path)
        assert made.returncode == 0, made.stderr
        before = _tick(src, "q")
        feed = Feed(FeedOptions(src, "q", "spark_feed", (), None, 1000))
        feed.open()
        assert feed.newest() == before
        primary.stop("immediate")
        got: dict[str, object] = {}

        def newest() -> None:
            try:
                got["tick"] = feed.newest()
            except Exception as exc:  # noqa: BLE001 - the test reports it
                got["error"] = exc

        reader = threading.Thread(target=newest, daemon=True)
        reader.start()
        # The lost connection is dropped (a reconnect under way) or the call gave up.
        wait_until(lambda: feed._conn is None or not reader.is_alive(), 30, "the lost connection")
        _fail_over(primary, standby)
        reader.join(90)
        assert "error" not in got, got
        assert got["tick"] == before
        after = _tick(src, "q")
        assert after > before and feed.newest() == after
        feed.close()
    finally:
        if standby is not None:
            standby.destroy()
        primary.destroy()
