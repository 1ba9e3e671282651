"""The provider's pair run by Patroni and etcd, its leader killed under load.

What users run: Patroni promotes the synchronous standby (``synchronous_mode``), the
connect strings name both nodes with ``target_session_attrs=read-write``, and the ticker,
the worker and the application's load find the new leader by themselves.  No commit the
application saw is lost, and the leaf ends equal to its new provider.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgferry.testing.cluster import LocalCluster, make_cluster
from pgferry.testing.patroni import HaScenario, PatroniPair, patroni_missing
from pgferry.testing.scenario import Load, sql, wait_until

MISSING = patroni_missing()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(MISSING is not None, reason=MISSING or ""),
]


@pytest.fixture
def pair() -> Iterator[PatroniPair]:
    made = PatroniPair()
    try:
        yield made.start()
    finally:
        made.stop()


@pytest.fixture
def leaf_cluster() -> Iterator[LocalCluster]:
    cluster = make_cluster("patroni-leaf")
    yield cluster
    cluster.destroy()


def _serving_root(scenario: HaScenario) -> str | None:
    _, report = scenario.status(scenario.LEAF_INI)
    return next((n.get("server") for n in report["nodes"] if n["name"] == scenario.ROOT), None)


def test_leader_killed_under_load(pair: PatroniPair, leaf_cluster: LocalCluster,
                                  tmp_path: Path) -> None:  # fmt: skip
    leaf = f"host=127.0.0.1 port={leaf_cluster.port} user=postgres"
    scenario = HaScenario(root=pair.connstr(), leaf=leaf, workdir=tmp_path)
    try:
        scenario.setup()
        scenario.wait_synced()
        scenario.wait_equal()
        leader = pair.leader()
        assert leader is not None and _serving_root(scenario) == leader.server
        with Load(scenario.src) as load:
            applied = scenario.leaf_tick()
            wait_until(lambda: scenario.leaf_tick() > applied, 60, "the leaf replaying the load")
            started = time.monotonic()
            dead, new = pair.kill_leader()
            done = load.transactions
            wait_until(lambda: load.transactions >= done + 150, 90, "the load on the new leader")
            writes_back = time.monotonic() - started
        scenario.wait_equal(timeout=120)
        # Each committed login inserted one row: none the load saw committed is missing.
        rows = sql(scenario.src, "select count(*) from digoal_01.user_login_rec")[0][0]
        assert rows >= load.transactions > 0
        wait_until(lambda: _serving_root(scenario) == new.server, 30, "status naming the leader")
        wait_until(lambda: scenario.status(scenario.LEAF_INI)[0] == 0, 60, "status exit 0")
        assert scenario.worker_running() and scenario.pid("pgqd") is not None
        print(f"writes back {writes_back:.1f} s after {dead.name} was killed")
    finally:
        scenario.shutdown()
