"""A leaf whose Spark master cannot be reached: replay goes on on the driver, Spark is tried
again later, and a copy that needs Spark fails with one line and is retried."""

from __future__ import annotations

import logging
import time

import pytest

from pgferry.apply.worker import Worker
from pgferry.polling import wait_until
from pgferry.testing.cluster import free_port

TABLE = "create table public.{t} (id int primary key, v text)"
START_FAILED = "Spark did not start, replaying on the driver"


def _run_until(worker: Worker, check, timeout: float = 60, what: str = "condition"):
    """Run the worker's loop until ``check`` holds (the loop is what is under test)."""

    def step():
        worker.work()
        return check()

    return wait_until(step, timeout=timeout, interval=0.02, what=what)


@pytest.fixture
def copies_need_spark(monkeypatch) -> None:
    """Copies of any size go through Spark (small ones would run on the driver)."""
    import pgferry.pipeline.copy as copy_pkg

    monkeypatch.setattr(copy_pkg, "LOCAL_PAGES", -1)


@pytest.mark.timing
def test_unreachable_master_replays_on_the_driver(pair, caplog, copies_need_spark) -> None:
    bad = f"spark://127.0.0.1:{free_port()}"
    pair.root(TABLE.format(t="items"))
    pair.leaf(TABLE.format(t="items"))
    pair.add_tables("public.items", expect_sync=True)
    # Every batch counts as large, so each one asks for Spark; retries come fast.
    worker = pair.worker(spark_master=bad, replay_local_events="0", spark_idle_timeout="0.5")
    worker.may_warm_spark = True
    caplog.set_level(logging.WARNING, logger="pgferry.apply.replay.spark_session")

    def failures() -> list[str]:
        return [r.getMessage() for r in caplog.records if START_FAILED in r.getMessage()]

    started = time.monotonic()
    rounds = 0
    while len(failures()) < 2:
        assert time.monotonic() - started < 60, "Spark's start was not tried again"
        rounds += 1
        pair.root(
            "insert into items select g, 'r' || %s from generate_series(%s::int, %s::int) g",
            (rounds, rounds * 100, rounds * 100 + 99),
        )
        target = pair.tick()
        _run_until(worker, lambda t=target: pair.last_tick() == t, what=f"tick {target}")
        pair.same("items")
        time.sleep(0.3)  # idle loops: the worker is caught up and tries Spark again
        worker.work()
    assert worker.spark_batches == 0  # every batch was applied on the driver
    assert pair.leaf("select count(*) from items") == [(rounds * 100,)]
    reason = f"Spark master {bad} cannot be reached: Connection refused"
    assert failures()[0] == f"{START_FAILED}: {reason}"
    assert all("\n" not in line for line in failures())

    # A copy needs Spark: it fails with that line, the table waits, replay goes on.
    pair.root(TABLE.format(t="other"))
    pair.leaf(TABLE.format(t="other"))
    pair.root("insert into other values (1, 'a')")
    pair.add_tables("public.other")

    def copy_error() -> str | None:
        rows = pair.leaf(
            "select copy_error from ferry.table_info where table_name = 'public.other'"
        )
        return rows[0][0] if rows else None

    assert _run_until(worker, copy_error, what="the copy's error") == reason
    pair.root("update items set v = 'after' where id < 150")
    target = pair.tick()
    _run_until(worker, lambda: pair.last_tick() == target, what="replay beside the failed copy")
    pair.same("items")
    states = pair.leaf("select merge_state from ferry.table_info where table_name = 'public.other'")
    assert states != [("ok",)]
    worker.cancel_copies()


@pytest.mark.parametrize(
    "setting",
    ["spark_master=sc://spark.example:15002/;token=hush", "spark.remote=sc://x:1/;token=hush"],
)
def test_spark_connect_is_refused_in_one_line(pair, setting, copies_need_spark) -> None:
    key, value = setting.split("=", 1)
    pair.root(TABLE.format(t="items"))
    pair.leaf(TABLE.format(t="items"))
    pair.root("insert into items values (1, 'a')")
    pair.add_tables("public.items")
    worker = pair.worker(**{key: value})

    def copy_error() -> str | None:
        rows = pair.leaf("select copy_error from ferry.table_info")
        return rows[0][0] if rows else None

    error = _run_until(worker, copy_error, what="the copy's error")
    worker.cancel_copies()
    assert error.startswith("Spark Connect (sc://") and "is not supported by the worker" in error
    assert "hush" not in error and "\n" not in error


def test_small_copy_needs_no_master(pair) -> None:
    """A table small enough for the driver is copied and replayed with the master down."""
    pair.root(TABLE.format(t="items"))
    pair.leaf(TABLE.format(t="items"))
    pair.root("insert into items select g, 'v' from generate_series(1, 500) g")
    pair.add_tables("public.items")
    worker = pair.worker(spark_master=f"spark://127.0.0.1:{free_port()}")
    pair.catch_up(worker)
    pair.root("update items set v = 'w' where id % 3 = 0")
    pair.catch_up(worker)
    pair.same("items")
    assert pair.leaf("select copy_error from ferry.table_info") == [(None,)]


def test_spark_remote_is_left_to_the_commands(pair, spark, caplog, copies_need_spark) -> None:
    """A worker whose ini names a Spark Connect server copies on its spark_master (here the
    process's local session) and says so once: the server is not asked at all."""
    caplog.set_level(logging.INFO, logger="pgferry.apply.replay.spark_session")
    pair.root(TABLE.format(t="items"))
    pair.leaf(TABLE.format(t="items"))
    pair.root("insert into items select g, 'a' from generate_series(1, 300) g")
    pair.add_tables("public.items")
    worker = pair.worker(spark_remote=f"sc://127.0.0.1:{free_port()}/;token=hush")
    pair.catch_up(worker)
    pair.same("items")
    assert pair.leaf("select copy_error from ferry.table_info") == [(None,)]
    said = [r.getMessage() for r in caplog.records if "spark_remote" in r.getMessage()]
    assert len(said) == 1 and "hush" not in said[0]
