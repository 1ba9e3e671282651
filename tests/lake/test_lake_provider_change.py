"""A lake leaf moved to another provider while a batch is in flight: the lake commit of
that batch and the node's position must not part, or the next batch, read from the new
provider over other tick bounds, writes the same changes again (a keyless table's rows
twice).  change-provider waits for the batch in flight; the batch ends recorded.  A
worker killed between the two commits, the node moved before it runs again: its next batch
ends at the tick the lake holds."""

from __future__ import annotations

import multiprocessing
import signal
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from conftest import sorted_rows
from lake_killed_child import killed_after_the_lake_commit
from psycopg import sql

from pgferry.lake import delta
from pgferry.testing.load import Load
from tests.fixtures.fix_cascade import Tree

KEYLESS = sql.Identifier("public", "k")


def _module(fmt: str):
    if fmt == "iceberg":
        pytest.importorskip("pyiceberg")
        from pgferry.lake import iceberg

        return iceberg
    return delta


def _lake_rows(lake_dir, fmt: str) -> list[tuple]:
    """The rows of the lake table public.k, sorted."""
    if fmt == "iceberg":
        from pgferry.lake import iceberg

        table = iceberg.catalog(str(lake_dir)).load_table(("public", "k"))
        return sorted_rows(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())
    rows = delta.rows_at(str(lake_dir / "public" / "k")).to_pylist()
    return sorted_rows(tuple(r.values()) for r in rows)


def _lake_cascade(
    make_tree, new_db_a, new_db_b, lake_dir, fmt: str = "delta", **settings: str
) -> Tree:
    """root, branch under it, and a lake leaf under the root, all holding the keyless
    ``public.k`` (the leaf in a Delta table) and the keyed test table; ``settings``: more
    of the lake leaf's ini."""
    tree = make_tree()
    tree.add_node("root", new_db_a(None), "root", None)
    tree.add_node("branch", new_db_b(None), "branch", "root")
    lake = new_db_a(None)
    tree.dsns["lake"] = lake
    tree.node("lake", lake, "leaf", "root", job_name=f"{tree.queue}_lake_job",
              lake_path=str(lake_dir), lake_format=fmt, **settings)  # fmt: skip
    for node in ("root", "branch", "lake"):
        tree.sql(node, sql.SQL("create table {} (id int, v text)").format(KEYLESS))
    tree.sql("root", sql.SQL("alter table {} replica identity full").format(KEYLESS))
    tree.add("root", "public.k")
    tree.add("branch", "public.k", expect_sync=True)
    tree.add("lake", "public.k", handler="lake")
    return tree


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_change_provider_waits_for_the_lake_batch_in_flight(
    make_tree, new_db_a, new_db_b, lake_dir, monkeypatch, fmt
) -> None:
    module = _module(fmt)
    tree = _lake_cascade(make_tree, new_db_a, new_db_b, lake_dir, fmt)
    tree.sql("root", sql.SQL("insert into {} select g, 'a' from generate_series(1, 5) g")
             .format(KEYLESS))  # fmt: skip
    type(tree).__mro__[1].catch_up(tree, "branch", "lake")  # the lake's load done too
    tree.sql("root", sql.SQL("insert into {} select g, 'b' from generate_series(1, 5) g")
             .format(KEYLESS))  # fmt: skip
    in_flight = tree.catch_up("branch")  # the branch holds the tick the lake leaf takes next

    real = module.multiset
    moved: list[object] = []
    mover = threading.Thread(
        target=lambda: moved.append(
            tree.cli("lake", "change-provider", "--provider=branch", "--timeout=30")
        )
    )

    def during(*args, **kwargs):
        written = real(*args, **kwargs)
        # The move runs while the batch's lake commit is made and its PostgreSQL commit is
        # not: it must wait for the batch (fixed: its pause waits on the node's row).
        mover.start()
        tree.wait_for(
            lambda: moved
            or tree.sql("lake", "select count(*) from pg_stat_activity where datname ="
                        " current_database() and wait_event_type = 'Lock'")[0][0] > 0,
            what="change-provider to run or to wait",
        )  # fmt: skip
        return written

    monkeypatch.setattr(module, "multiset", during)
    try:
        tree.worker("lake").work()
    except Exception as exc:  # the batch refused at its PostgreSQL commit
        assert "Provider changed" in str(exc)
    monkeypatch.setattr(module, "multiset", real)
    mover.join(timeout=60)
    assert moved and moved[0].code == 0, moved and moved[0].err
    assert tree.provider("lake") == "branch"
    assert (tree.last_tick("lake") or 0) >= in_flight
    tree.sql("root", sql.SQL("insert into {} select g, 'c' from generate_series(1, 5) g")
             .format(KEYLESS))  # fmt: skip
    tree.sql("root", sql.SQL("delete from {} where v = 'a' and id <= 2").format(KEYLESS))
    tree.tick()
    tree.catch_up("branch", "lake")
    expected = sorted_rows(tree.sql("root", sql.SQL("select * from {}").format(KEYLESS)))
    assert len(expected) == 13
    assert sorted_rows(tree.sql("branch", sql.SQL("select * from {}").format(KEYLESS))) == (
        expected
    )
    assert _lake_rows(lake_dir, fmt) == expected


def _killed_after_a_lake_commit(tree: Tree, rows: sql.Composable, fmt: str) -> tuple[int, int]:
    """Rows 'a' applied everywhere, rows 'b' to the branch; then the lake's worker, in a
    process of its own, SIGKILLed between the lake commit of 'b' and PostgreSQL's.
    Returns the node's tick before (still its position) and the tick the branch applied
    'b' at (the lake's, not the node's)."""
    tree.sql("root", rows, ("a",))
    type(tree).__mro__[1].catch_up(tree, "branch", "lake")
    tree.sql("root", rows, ("b",))
    written = tree.catch_up("branch")
    before = tree.last_tick("lake") or 0
    tree.workers.pop("lake").conns.close()  # the child's worker takes the node's lock
    # Spawned: delta-rs's runtime does not survive a fork.
    child = multiprocessing.get_context("spawn").Process(
        target=killed_after_the_lake_commit, args=(str(tree.paths["lake"]), fmt)
    )
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    assert tree.last_tick("lake") == before < written
    return before, written


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_batch_in_the_lake_but_not_recorded_is_not_written_twice_after_a_move(
    make_tree, new_db_a, new_db_b, lake_dir, fmt
) -> None:
    """The worker is SIGKILLed between the lake commit and PostgreSQL's, and the node is
    moved before it runs again: the new provider's batches have other bounds.  The worker
    started again sees the lake ahead of its position, ends its next batch at the tick the
    lake holds (skipped there, recorded) and goes on: every row once, no resync."""
    tree = _lake_cascade(make_tree, new_db_a, new_db_b, lake_dir, fmt)
    rows = sql.SQL("insert into {} select g, %s from generate_series(1, 5) g").format(KEYLESS)
    before, written = _killed_after_a_lake_commit(tree, rows, fmt)
    assert len(_lake_rows(lake_dir, fmt)) == 10  # the lake holds the batch, the node not
    tree.sql("root", rows, ("c",))
    tree.sql("root", sql.SQL("delete from {} where v = 'b' and id = 1").format(KEYLESS))
    tree.catch_up("branch")  # the branch's next batch spans 'c' and the delete
    res = tree.cli("lake", "change-provider", "--provider=branch")
    assert res.code == 0, res.err

    tree.worker("lake").work()
    assert tree.last_tick("lake") == written  # the batch ended at the lake's tick
    assert len(_lake_rows(lake_dir, fmt)) == 10  # skipped: nothing written twice
    type(tree).__mro__[1].catch_up(tree, "branch", "lake")
    expected = sorted_rows(tree.sql("root", sql.SQL("select * from {}").format(KEYLESS)))
    assert len(expected) == 14
    assert _lake_rows(lake_dir, fmt) == expected
    assert tree.sql("lake", "select cur_error from ferry_node.local_state") == [(None,)]


def test_takeover_all_under_writes_keeps_the_lake_leaf_equal(
    make_tree, new_db_a, new_db_b, lake_dir, delta_rows
) -> None:
    """The branch takes the root's place with --all while rows keep coming into the
    keyless table: the lake leaf moves under it and ends with the rows of every node."""
    tree = _lake_cascade(make_tree, new_db_a, new_db_b, lake_dir)
    insert = sql.SQL("insert into {} values (%s, 'w')").format(KEYLESS)
    writer = Load([tree.dsns["root"], tree.dsns["branch"]],
                  lambda conn, done: conn.execute(insert, (done,)))  # fmt: skip
    tree.start("root", "branch", "lake")
    type(tree).__mro__[1].catch_up(tree, "branch", "lake")
    tree.start_ticker()
    writer.start()
    try:
        tree.wait_for(lambda: writer.done > 40, what="writes")
        res = tree.cli("branch", "takeover", "root", "--all", "--timeout=60")
        assert res.code == 0, res.err
        assert "moved lake" in res.out
        assert tree.provider("lake") == "branch" and tree.node_type("branch") == "root"
        at = writer.done
        tree.wait_for(lambda: writer.done > at + 40, what="writes on the new root")
    finally:
        writer.stop()
        tree.stop_ticker()
    tree.catch_up("root", "lake")
    expected = sorted_rows(tree.sql("branch", sql.SQL("select * from {}").format(KEYLESS)))
    assert len(expected) == writer.done
    old_root = sorted_rows(tree.sql("root", sql.SQL("select * from {}").format(KEYLESS)))
    assert old_root == expected
    assert delta_rows("k") == expected


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.mark.parametrize("reconcile", ["auto", "stop"])
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_lake_tick_the_provider_lost_in_a_failover_is_not_taken_as_applied(
    make_tree, new_db_a, new_db_b, lake_dir, fmt, reconcile
) -> None:
    """The worker is SIGKILLed between the lake commit and PostgreSQL's, then the provider
    fails over to a standby that lacked that tick and makes one of the same id at another
    time (its tick_time changed here): the lake's tick is not the provider's.  The worker
    reconciles (nothing skipped, nothing written): the node stays where it is, the lake
    table is copied again and ends equal to the provider.  With failover_reconcile = stop
    it stops in one line naming the table to resync, and the resync does the same."""
    tree = _lake_cascade(make_tree, new_db_a, new_db_b, lake_dir, fmt,
                         failover_reconcile=reconcile)  # fmt: skip
    rows = sql.SQL("insert into {} select g, %s from generate_series(1, 5) g").format(KEYLESS)
    before, written = _killed_after_a_lake_commit(tree, rows, fmt)
    held = _lake_rows(lake_dir, fmt)
    assert len(held) == 10  # the lake holds the batch, the node not
    tree.sql(
        "root",
        "update ferry_queue.tick set tick_time = tick_time + interval '1 second'"
        " where tick_id = %s",
        (written,),
    )

    state = "select merge_state from ferry.table_info where table_name = 'public.k' and local"
    if reconcile == "stop":
        with pytest.raises(Exception) as failed:
            tree.worker("lake").work()
        message = str(failed.value)
        assert f"Diverged provider: lake table public.k holds tick {written} made at" in message
        assert "resync public.k" in message and len(message.splitlines()) == 1, message
        assert tree.sql("lake", state) == [("ok",)]
    else:
        assert tree.worker("lake").work()  # reconciled: the lake table is copied again
        assert tree.sql("lake", state) != [("ok",)]
    assert tree.last_tick("lake") == before  # not recorded as applied
    assert _lake_rows(lake_dir, fmt) == held

    if reconcile == "stop":
        res = tree.cli("lake", "resync", "public.k")
        assert res.code == 0, res.err
    tree.sql("root", rows, ("c",))
    type(tree).__mro__[1].catch_up(tree, "branch", "lake")
    expected = sorted_rows(tree.sql("root", sql.SQL("select * from {}").format(KEYLESS)))
    assert len(expected) == 15
    assert _lake_rows(lake_dir, fmt) == expected


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_lake_commit_is_of_the_provider_s_tick_only_at_its_time(lake_dir, fmt) -> None:
    """What replay's skip of a part the lake holds and the bound at a lake tick ahead ask
    of a real lake table: its tick's recorded time against the provider's.  A commit
    without a time (a repair's, or one of an older pgferry) is passed over; a tick none of
    whose commits records a time is not checked."""
    import pyarrow as pa

    from pgferry.errors import DivergedProvider
    from pgferry.handlers import lake
    from pgferry.lake.spec import PARTS, LakeSpec

    module = _module(fmt)
    spec = LakeSpec(fmt, str(lake_dir), "public", "t", "q:n:public.t")
    schema = pa.schema([("id", pa.int32()), ("v", pa.string())])
    module.prepare(spec, schema, [])
    rows = pa.table({"id": [1], "v": ["a"]}, schema=schema)
    made = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    module.append(spec, rows, 7 * PARTS, 7, made)
    module.append(spec, rows, 7 * PARTS, 7)  # a repair at tick 7: no time
    module.append(spec, rows, 8 * PARTS, 8)  # an older pgferry's commit: no time
    assert module.tick_time_of(spec, 7) == made
    lake.check_same_tick(module, spec, 7, made, "public.t")
    lake.check_same_tick(module, spec, 7, made.astimezone(timezone(timedelta(hours=2))), "x")
    lake.check_same_tick(module, spec, 8, made, "public.t")
    later = made + timedelta(seconds=1)
    with pytest.raises(DivergedProvider) as diverged:
        lake.check_same_tick(module, spec, 7, later, "public.t")
    assert str(diverged.value) == (
        f"Diverged provider: lake table public.t holds tick 7 made at {made}, but the"
        f" provider's tick 7 was made at {later}: the provider lost that tick after the lake"
        " committed it; resync public.t (see docs/failover.md)"
    )
