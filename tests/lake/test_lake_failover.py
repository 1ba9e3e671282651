"""A lake leaf whose state database fails over to a lagging streaming standby: the state's
recorded tick is older than the lake's newest commit and than its position on the root;
the worker rewinds the root's position and the batches come again, skipped in the lake
where they were committed already.  No resync: the lake ends equal to the root."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import sorted_rows

from pgferry.testing.cascade import Cascade
from pgferry.testing.cluster import LocalCluster, make_cluster
from pgferry.testing.standby import Standby, both_hosts, make_standby


@pytest.fixture
def state_pair() -> Iterator[tuple[LocalCluster, Standby]]:
    primary = make_cluster("lakestate")
    primary.createdb("state")
    standby = make_standby(primary, "lakestate_s")
    yield primary, standby
    primary.destroy(background=True)
    standby.destroy()


def test_lake_state_fails_over_to_a_lagging_standby(
    make_cascade, state_pair, db_a, lake_dir: Path, delta_rows
) -> None:
    primary, standby = state_pair
    cascade: Cascade = make_cascade()
    cascade.node("root", db_a, "root")
    cascade.node("leaf", both_hosts(primary, standby.cluster, "state"), "leaf", "root",
                 lake_path=str(lake_dir))  # fmt: skip
    for node in ("root", "leaf"):
        cascade.sql(node, "create table public.t (id int primary key, v int)")
    cascade.add("root", "public.t")
    cascade.add("leaf", "public.t", handler="lake")
    cascade.sql("root", "insert into t select g, g from generate_series(1, 20) g")
    cascade.start("leaf")
    cascade.catch_up("leaf")
    standby.wait_caught_up()
    standby.cut_off()
    for i in range(3):  # batches in the lake that the standby's state does not know of
        cascade.sql("root", "update t set v = v + 100 where id <= %s", (5 + i,))
        cascade.sql("root", "insert into t values (%s, 0)", (100 + i,))
        cascade.catch_up("leaf")
    applied = cascade.last_tick("leaf")
    cascade.stop("leaf")
    primary.stop("immediate")
    standby.promote()
    assert (cascade.last_tick("leaf") or 0) < (applied or 0)  # the state lags the lake
    cascade.sql("root", "delete from t where id = 1")
    cascade.start("leaf")
    cascade.catch_up("leaf")
    assert delta_rows("t") == sorted_rows(cascade.sql("root", "select * from t"))
