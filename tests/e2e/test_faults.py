"""Fault injection under load: after every fault, every node catches up and equals its source.

Each round runs the load, injects one fault (worker SIGKILL, subscriber or provider server
stopped fast/immediate, ticker stopped, a backlog, a resync killed mid-copy, a worker
SIGKILLed that ``status`` must call down with exit 1, a column renamed and back under
capture-ddl while both leaves are stopped behind, a branch taking over the branch that
feeds the Delta and Iceberg lake leaves with ``takeover --all``), stops the load and waits
until every replicated table — the full leaf, the partial renamed leaf, the branches and
the lake tables — equals the source.  The provider failing over to an asynchronous
standby that lacks its last commits runs on a root of its own (a primary and its
standby), its rounds checking the rows listed lost.
``tools/soak.py`` runs the same rounds for as long as you like.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgferry.testing.cluster import LocalCluster, make_cluster
from pgferry.testing.faults import Faults
from pgferry.testing.scenario import Load, Scenario, sql, wait_until


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[LocalCluster, LocalCluster]]:
    root = make_cluster("faults-root")
    sub = make_cluster("faults-sub")
    yield root, sub
    sub.destroy()
    root.destroy()


ONE_SERVER_FAULTS = [f for f in Faults.FAULTS if f not in Faults.HA_FAULTS]


def _positions(scenario: Scenario) -> list[int]:
    query = "select last_tick_id from ferry_node.local_state"
    return [sql(dsn, query)[0][0] or 0 for dsn in (scenario.dst1, scenario.dst2)]


@pytest.mark.slow
def test_every_fault_ends_equal(clusters, tmp_path: Path) -> None:
    root, sub = clusters
    scenario = Scenario(root, sub, tmp_path)
    faults = Faults(scenario)
    rng = random.Random(20261125)
    try:
        scenario.setup()
        scenario.wait_synced()
        scenario.wait_equal()
        for fault in ONE_SERVER_FAULTS:
            with Load(scenario.src) as load:
                # Each fault meets both leaves replaying the load, which goes on after it.
                start = _positions(scenario)
                wait_until(
                    lambda s=start: all(
                        p > b for p, b in zip(_positions(scenario), s, strict=True)
                    ),
                    60,
                    "both leaves replaying the load",
                )
                faults.inject(fault, rng)
                done = load.transactions
                wait_until(lambda d=done: load.transactions >= d + 150, 60, "the load after it")
            assert load.transactions > 0
            scenario.wait_synced()
            scenario.wait_equal()
        for dsn in (scenario.dst1, scenario.dst2):
            errors = scenario.cli(
                "dst1_digoal_01.ini" if dsn == scenario.dst1 else "dst2_digoal_02.ini", "status"
            )
            assert "ERR:" not in errors
        assert len(faults.faults) == len(ONE_SERVER_FAULTS)
        assert scenario.failures == []
    finally:
        scenario.shutdown()


@pytest.mark.slow
def test_provider_failover_under_load(tmp_path: Path) -> None:
    """Two failovers of the root to its asynchronous standby cut off under load: both
    leaves, both branches and the Delta and Iceberg lake leaves below the first end equal
    to the new primary, and every row the two leaves held that it lacked is listed in
    their ferry_node.lost_after_failover."""
    root = make_cluster("failover-root")
    sub = make_cluster("failover-sub")
    scenario = Scenario(root, sub, tmp_path, ha_root=True, lakes=True)
    faults = Faults(scenario)
    rng = random.Random(20261129)
    try:
        scenario.setup()
        scenario.wait_synced()
        scenario.wait_equal()
        for _ in range(2):
            with Load(scenario.src) as load:
                wait_until(lambda: load.transactions >= 100, 60, "the load")
                faults.inject("fault_provider_failover", rng)
                done = load.transactions
                wait_until(lambda d=done: load.transactions >= d + 150, 60, "the load after it")
            scenario.wait_synced()
            scenario.wait_equal()
            assert faults.check_failover()
        assert faults.failovers == 2
        assert faults.rows_lost > 0  # the leaves applied ticks the standby never had
        assert faults.rows_listed >= faults.rows_lost
        assert scenario.failures == []
        # The old primary was copied again each time: the side still has its standby.
        assert scenario.root_standby is not None
        standby = scenario.root_standby.cluster
        assert sql(standby.connstr("postgres"), "select pg_is_in_recovery()") == [(True,)]
    finally:
        scenario.shutdown()
        sub.destroy()
        scenario.root_cluster.destroy()
        if scenario.root_standby is not None:
            scenario.root_standby.destroy()
