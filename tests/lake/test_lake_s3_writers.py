"""Exactly once and one writer per table on object storage, against the S3-protocol
server of the tests (moto's, ``pgferry.testing.s3``).

A worker process is killed with SIGKILL after its lake commit and before the PostgreSQL
commit that records the tick (held there by a lock the test takes on the node's position
row); the next worker finds the tick's version in the Delta log and skips it: the tick is
in one commit.  Two writers of one version (what a second process pointed at the table
would be) race: delta-rs commits with a conditional PUT, the store lets one win and the
other gets a conflict; a second worker of the node is refused by the node's lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psycopg
import pytest
from conftest import s3_rows, sorted_rows

from pgferry.errors import AlreadyRunning
from pgferry.lake import storage
from pgferry.polling import wait_until

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def _history(server, location: str) -> list[dict]:
    from deltalake import DeltaTable

    table = DeltaTable(location, storage_options=storage.delta_options(server.options()))
    return table.history()


def _ticks(server, location: str) -> list[int]:
    """The pgferry.tick of each commit after the table's creation, oldest first."""
    history = _history(server, location)
    return [int(h["pgferry.tick"]) for h in reversed(history) if h.get("pgferry.tick") is not None]


def _worker(pair) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC))
    return subprocess.Popen(
        [sys.executable, "-m", "pgferry", str(pair.leaf_cfg.path), "worker"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _lock_gone(pair) -> bool:
    held = (
        "select count(*) from pg_locks where locktype = 'advisory'"
        " and classid = hashtext('pgferry-worker')::oid"
        " and database = (select oid from pg_database where datname = current_database())"
    )
    return pair.leaf(held) == [(0,)]


def test_sigkill_between_the_two_commits(make_pair, s3_lake) -> None:
    server, path = s3_lake
    pair = make_pair(lake_path=path, **server.settings())
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.root("insert into t select g, g from generate_series(1, 100) g")
    pair.add_tables("public.t", handler="lake")
    pair.catch_up().conns.close()
    wait_until(lambda: _lock_gone(pair), timeout=30, what="the test's worker to let go")
    location = f"{path}/public/t"

    hold = psycopg.connect(pair.leaf_dsn)
    hold.execute("select 1 from ferry_node.local_state where queue_name = %s for share",
                 (pair.queue,))  # fmt: skip
    proc = _worker(pair)
    try:
        pair.root("update t set v = -v where id <= 30")
        pair.root("delete from t where id > 90")
        tick = pair.tick()
        wait_until(lambda: tick in _ticks(server, location), timeout=120,
                   what="the batch's lake commit")  # fmt: skip
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        hold.close()
    assert pair.last_tick() < tick  # the tick is in the lake, not recorded in PostgreSQL
    wait_until(lambda: _lock_gone(pair), timeout=30, what="the killed worker's session to end")

    proc = _worker(pair)
    try:
        pair.root("insert into t values (1000, 1)")
        later = pair.tick()
        wait_until(lambda: (pair.last_tick() or 0) >= later, timeout=120,
                   what="the new worker to catch up")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(30)
    assert _ticks(server, location).count(tick) == 1  # exactly once
    assert s3_rows(server, location) == sorted_rows(pair.root("select id, v from t"))


def test_two_writers_of_one_table(make_pair, s3_lake) -> None:
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    server, path = s3_lake
    pair = make_pair(lake_path=path, **server.settings())
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.root("insert into t select g, g from generate_series(1, 10) g")
    pair.add_tables("public.t", handler="lake")
    worker = pair.catch_up()
    location = f"{path}/public/t"

    # A second worker of the node: refused by the node's lock.
    from pgferry.apply.worker import Worker

    second = Worker(pair.leaf_cfg)
    try:
        with pytest.raises(AlreadyRunning):
            second.work()
    finally:
        second.conns.close()

    # Two writers of the table's next version: the store takes one commit file only.
    options = storage.delta_options(server.options())
    assert options["conditional_put"] == "etag"
    one, two = (DeltaTable(location, storage_options=options) for _ in range(2))
    import pyarrow as pa

    rows = pa.table({"id": pa.array([1], pa.int32()), "v": pa.array([-1], pa.int32())})
    before = one.version()
    one.merge(
        rows, "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_update_all().execute()
    with pytest.raises(CommitFailedError):
        two.merge(rows, "t.id = s.id", source_alias="s",
                  target_alias="t").when_matched_update_all().execute()  # fmt: skip
    assert DeltaTable(location, storage_options=options).version() == before + 1
    # The store itself refuses a second commit file of one version.
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    log_key = f"{prefix}/_delta_log/{before + 1:020d}.json"
    with pytest.raises(server.client.exceptions.ClientError, match="PreconditionFailed"):
        server.client.put_object(Bucket=bucket, Key=log_key, Body=b"{}", IfNoneMatch="*")
    worker.conns.close()
