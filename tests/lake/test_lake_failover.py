"""A lake leaf whose state database fails over to a lagging streaming standby: the state's
recorded tick is older than the lake's newest commit and than its position on the root;
the worker rewinds the root's position and the batches come again, skipped in the lake
where they were committed already.  No resync: the lake ends equal to the root.

A lake leaf below a branch whose provider, the root, fails over to a standby that lacked
its last ticks: the branch reconciles and cuts its queue back, the lake leaf reconciles
with it (its lost rows listed from the lake, its changed lake tables copied again)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import sorted_rows

from pgferry.apply.worker import Worker
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


KEYED = 'public."Lost é"'
KEYLESS = "public.k"


@pytest.fixture
def root_pair() -> Iterator[tuple[LocalCluster, Standby]]:
    primary = make_cluster("lakeroot")
    primary.createdb("db")
    standby = make_standby(primary, "lakeroot_s")
    yield primary, standby
    primary.destroy(background=True)
    standby.destroy()


def _lake_rows(lake_dir: Path, fmt: str, table: str) -> list[tuple]:
    """The rows of the lake table public.<table>, sorted."""
    if fmt == "iceberg":
        from pgferry.lake import iceberg

        found = iceberg.catalog(str(lake_dir)).load_table(("public", table)).scan().to_arrow()
    else:
        from pgferry.lake import delta

        found = delta.rows_at(str(lake_dir / "public" / table))
    return sorted_rows(tuple(r.values()) for r in found.to_pylist())


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_lake_leaf_below_a_branch_that_reconciles(
    make_cascade, root_pair, new_db_a, new_db_b, lake_dir: Path, monkeypatch, fmt: str
) -> None:
    """root (on a pair) -> branch -> lake leaf.  The root fails over to its asynchronous
    standby, which lacks the last ticks: the branch applied them, and the lake leaf was
    writing a batch of them into the lake (a keyed and a keyless table) when the branch
    reconciled and cut its queue back.  The leaf must reconcile with the branch in turn:
    list the rows the new root lost from its lake, copy the changed lake tables again and
    end equal to the new root, with no step by hand."""
    if fmt == "iceberg":
        pytest.importorskip("pyiceberg")
    from pgferry.lake import formats

    primary, standby = root_pair
    cascade: Cascade = make_cascade()
    cascade.node("root", both_hosts(primary, standby.cluster, "db"), "root")
    cascade.node("branch", new_db_b(None), "branch", "root")
    cascade.node("leaf", new_db_a(None), "leaf", "branch", lake_path=str(lake_dir),
                 lake_format=fmt)  # fmt: skip
    for node in ("root", "branch", "leaf"):
        cascade.sql(node, f'create table {KEYED} (id int primary key, "Val" text)')
        cascade.sql(node, f"create table {KEYLESS} (id int, v text)")
    cascade.sql("root", f"alter table {KEYLESS} replica identity full")
    cascade.add("root", KEYED, KEYLESS)
    cascade.add("branch", KEYED, KEYLESS)
    cascade.add("leaf", KEYED, KEYLESS, handler="lake")
    cascade.sql("root", f"insert into {KEYED} select g, 'before' from generate_series(1, 10) g")
    cascade.sql("root", f"insert into {KEYLESS} select g, 'before' from generate_series(1, 5) g")
    cascade.start("branch", "leaf")
    cascade.catch_up("branch", "leaf")
    cascade.stop("leaf")
    standby.wait_caught_up()
    standby.cut_off()
    # A tick the standby never gets, the first after the leaf's position: the branch
    # applies it, and the leaf's next batch holds it.
    lost = "insert into {} select g, 'lost' from generate_series(11, 20) g"
    cascade.sql("root", lost.format(KEYED))
    cascade.sql("root", lost.format(KEYLESS))
    cascade.catch_up("branch")

    # The leaf's worker takes its next batch (from the last tick the standby holds to one
    # past it) and is held inside its lake write while the root fails over and the branch
    # reconciles.
    module = formats.module(fmt)
    real_merge = module.merge
    inside, release = threading.Event(), threading.Event()

    def merge(*args, **kwargs):
        inside.set()
        assert release.wait(120), "never released"
        return real_merge(*args, **kwargs)

    monkeypatch.setattr(module, "merge", merge)
    worker = Worker(cascade.config("leaf"))
    failed: list[BaseException] = []

    def step() -> None:
        try:
            for _ in range(100):  # its loops until it has taken that batch and applied it
                worker.work()
                if inside.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failed.append(exc)

    stepper = threading.Thread(target=step)
    stepper.start()
    try:
        assert inside.wait(60), "the leaf's batch never reached the lake"
        primary.stop("immediate")
        standby.promote()
        after = "insert into {} select g, 'after' from generate_series(100, 104) g"
        cascade.sql("root", after.format(KEYED))
        cascade.sql("root", after.format(KEYLESS))
        cascade.sql("root", f"""update {KEYED} set "Val" = 'after' where id = 3""")
        cascade.catch_up("branch")  # reconciled: its queue cut back below the leaf's batch
    finally:
        release.set()
        stepper.join(120)
        worker.shutdown()
    assert failed == []
    monkeypatch.setattr(module, "merge", real_merge)

    cascade.start("leaf")
    cascade.catch_up("branch", "leaf")
    keyed = cascade.sql("root", f'select id, "Val" from {KEYED}')
    assert [r for r in keyed if r[1] == "lost"] == []
    assert _lake_rows(lake_dir, fmt, "Lost é") == sorted_rows(keyed)
    keyless = cascade.sql("root", f"select id, v from {KEYLESS}")
    assert _lake_rows(lake_dir, fmt, "k") == sorted_rows(keyless)
    listed = cascade.sql(
        "leaf",
        "select table_name, row_key, held_here ->> 'Val', on_provider ->> 'Val'"
        " from ferry_node.lost_after_failover order by (held_here ->> 'id')::int",
    )
    # Row 3, changed on the new root after the failover, shows with its new value beside.
    assert listed == [(KEYED, "(3)", "before", "after")] + [
        (KEYED, f"({i})", "lost", None) for i in range(11, 21)
    ]
