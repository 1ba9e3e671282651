"""Exactly once into Delta: a worker killed at each step of a batch (before the lake
commit, between it and the PostgreSQL commit, before finish_batch) and during the initial
load; afterwards the lake holds every change once and each tick's part is one commit.

Faults are injected from here (the format module's functions raise), and the worker is
then dropped with its connections as a killed process would be: its open transaction
rolls back."""

from __future__ import annotations

import pytest
from conftest import sorted_rows

from pgferry.lake import delta
from pgferry.queue import batches as queue_batches


class Killed(Exception):
    pass


def _commits(lake_dir, table: str) -> list[int | None]:
    """The tick of each commit of the table after its creation, oldest first."""
    from deltalake import DeltaTable

    history = DeltaTable(str(lake_dir / "public" / table)).history()
    return [h.get("pgferry.tick") for h in reversed(history) if h["version"] > 0]


def _restart(pair):
    return pair.worker()  # the old one's connections are closed: its transaction is gone


@pytest.mark.parametrize("keyless", [False, True], ids=["key", "keyless"])
def test_kill_around_the_lake_commit(lake_pair, lake_dir, delta_rows, monkeypatch, keyless):
    pair = lake_pair()
    key = "" if keyless else " primary key"
    for side in (pair.root, pair.leaf):
        side(f"create table public.t (id int{key}, v int)")
    if keyless:
        pair.root("alter table t replica identity full")
    pair.root("insert into t select g, g from generate_series(1, 20) g")
    pair.add_tables("public.t", handler="lake")
    worker = pair.catch_up()
    assert _commits(lake_dir, "t") == [0]  # the load

    real = {name: getattr(delta, name) for name in ("merge", "multiset")}
    write = "multiset" if keyless else "merge"

    # 1. Killed before the lake commit: nothing anywhere, the batch comes again.
    pair.root("update t set v = -v where id <= 5")
    pair.root("delete from t where id = 20")
    tick = pair.tick()

    def before(*args, **kwargs):
        raise Killed("before the lake commit")

    monkeypatch.setattr(delta, write, before)
    with pytest.raises(Killed):
        worker.work()
    assert _commits(lake_dir, "t") == [0]

    # 2. Killed after the lake commit, before PostgreSQL's: the retry finds the version.
    def after(*args, **kwargs):
        real[write](*args, **kwargs)
        raise Killed("after the lake commit")

    monkeypatch.setattr(delta, write, after)
    worker = _restart(pair)
    with pytest.raises(Killed):
        worker.work()
    assert pair.last_tick() < tick
    assert _commits(lake_dir, "t") == [0, tick]
    monkeypatch.setattr(delta, write, real[write])
    worker = _restart(pair)
    worker.work()
    assert pair.last_tick() == tick
    assert _commits(lake_dir, "t") == [0, tick]  # skipped, not applied again
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))

    # 3. Killed after the PostgreSQL commit, before finish_batch: the batch is finished.
    pair.root("insert into t values (100, 100)")
    tick = pair.tick()

    def no_finish(conn, batch_id, **flags):
        raise Killed("before finish_batch")

    # Both ways a worker finishes a batch (with or without waking the ticker).
    finishes = ("finish_batch", "finish_batch_and_wake")
    real_finish = {name: getattr(queue_batches, name) for name in finishes}
    for name in finishes:
        monkeypatch.setattr(queue_batches, name, no_finish)
    with pytest.raises(Killed):
        worker.work()
    for name in finishes:
        monkeypatch.setattr(queue_batches, name, real_finish[name])
    worker = _restart(pair)
    pair.catch_up(worker)
    assert _commits(lake_dir, "t").count(tick) == 1
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))


def test_kill_after_a_truncate_commit(lake_pair, lake_dir, delta_rows, monkeypatch):
    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.root("insert into t select g, g from generate_series(1, 10) g")
    pair.add_tables("public.t", handler="lake")
    worker = pair.catch_up()
    pair.root("truncate t")
    pair.root("insert into t values (1, 1)")
    tick = pair.tick()
    real = delta.merge

    def after(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed("after the second part's lake commit")

    monkeypatch.setattr(delta, "merge", after)
    with pytest.raises(Killed):
        worker.work()
    assert _commits(lake_dir, "t") == [0, tick, tick]  # the truncate and the rows
    monkeypatch.setattr(delta, "merge", real)
    pair.catch_up(_restart(pair))
    assert _commits(lake_dir, "t") == [0, tick, tick]
    assert delta_rows("t") == [(1, 1)]


def test_kill_during_the_load(lake_pair, lake_dir, delta_rows, monkeypatch):
    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v text)")
    pair.root("insert into t select g, 'v' || g from generate_series(1, 500) g")
    real = delta.commit_files
    calls = []

    def killed(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # the files are written, the commit never happens
            raise Killed("before the load's commit")
        return real(*args, **kwargs)

    monkeypatch.setattr(delta, "commit_files", killed)
    pair.add_tables("public.t", handler="lake")
    pair.catch_up(pair.worker(exception_sleep="0.1"))
    assert len(calls) == 2
    assert _commits(lake_dir, "t") == [0]  # one load commit
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))


def test_kill_between_parts_of_one_batch(lake_pair, lake_dir, delta_rows, monkeypatch):
    """A table's batch read in ev_id ranges is several parts, each its own commit: a kill
    after the second leaves the retry to skip two and apply the rest."""
    pair = lake_pair(replay_read_ahead_events="1", replay_read_range_events="10")
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t", handler="lake")
    worker = pair.catch_up()
    for g in range(1, 41):
        pair.root(f"insert into t values ({g}, {g})")  # one event each: 40 ev_ids
    tick = pair.tick()  # a table's batch of inserts only is split into ranges
    real, calls = delta.merge, []

    def second(*args, **kwargs):
        calls.append(1)
        done = real(*args, **kwargs)
        if len(calls) == 2:
            raise Killed("after the second part's commit")
        return done

    monkeypatch.setattr(delta, "merge", second)
    with pytest.raises(Killed):
        worker.work()
    assert _commits(lake_dir, "t") == [0, tick, tick]
    monkeypatch.setattr(delta, "merge", real)
    pair.catch_up(_restart(pair))
    parts = _commits(lake_dir, "t").count(tick)
    assert parts >= 3  # the batch had more parts than the two committed before the kill
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))


def test_resync_loads_again(lake_pair, lake_dir, delta_rows):
    pair = lake_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.root("insert into t select g, g from generate_series(1, 10) g")
    pair.add_tables("public.t", handler="lake")
    worker = pair.catch_up()
    pair.root("delete from t where id > 5")
    pair.catch_up(worker)
    done = pair.cascade.cli("leafnode", "resync", "public.t")
    assert done.code == 0, done.err
    pair.root("insert into t values (100, 100)")
    pair.catch_up(worker)
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))
    pair.root("update t set v = -1")
    pair.catch_up(worker)  # replay after the load's version went back to 0
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))
