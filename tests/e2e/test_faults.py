"""Fault injection under load: after every fault, every node catches up and equals its source.

Each round runs the load, injects one fault (worker SIGKILL, subscriber or provider server
stopped fast/immediate, ticker stopped, a backlog, a resync killed mid-copy, a worker
SIGKILLed that ``status`` must call down with exit 1, a column renamed and back under
capture-ddl while both leaves are stopped behind, a branch taking over the branch that
feeds the Delta and Iceberg lake leaves with ``takeover --all``), stops the load and waits
until every replicated table — the full leaf, the partial renamed leaf, the branches and
the lake tables — equals the source.
``tools/soak.py`` runs the same rounds for as long as you like.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgferry.testing.cluster import LocalCluster, make_cluster
from pgferry.testing.scenario import Load, Scenario, sql, wait_until


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[LocalCluster, LocalCluster]]:
    root = make_cluster("faults-root")
    sub = make_cluster("faults-sub")
    yield root, sub
    sub.destroy()
    root.destroy()


def _positions(scenario: Scenario) -> list[int]:
    query = "select last_tick_id from ferry_node.local_state"
    return [sql(dsn, query)[0][0] or 0 for dsn in (scenario.dst1, scenario.dst2)]


@pytest.mark.slow
def test_every_fault_ends_equal(clusters, tmp_path: Path) -> None:
    root, sub = clusters
    scenario = Scenario(root, sub, tmp_path)
    rng = random.Random(20261125)
    try:
        scenario.setup()
        scenario.wait_synced()
        scenario.wait_equal()
        for fault in Scenario.FAULTS:
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
                scenario.inject(fault, rng)
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
        assert len(scenario.faults) == len(Scenario.FAULTS)
        assert scenario.failures == []
    finally:
        scenario.shutdown()
