"""The next batch read while this one is applied (apply/replay/prefetch.py): a catch-up of many
batches takes each next batch as read ahead, and the tables end equal on both sides."""

from __future__ import annotations

import logging

from pgferry.apply.replay.batch import Replayer

TABLES = ("public.a", "public.b")


def _backlog(pair, ticks: int) -> None:
    """Inserts, updates and deletes on both tables over ``ticks`` ticks."""
    for i in range(ticks):
        base = i * 20
        pair.root(f"insert into a select g, 'a{i}' from generate_series({base}, {base + 19}) g")
        pair.root(f"insert into b select g, {i} from generate_series({base}, {base + 19}) g")
        pair.root(f"update a set v = v || '+' where id % 3 = {i % 3}")
        pair.root(f"delete from b where id % 7 = {i % 7}")
        pair.tick()


def test_catch_up_takes_each_next_batch_as_read_ahead(pair, monkeypatch, caplog) -> None:
    for node in (pair.root, pair.leaf):
        node("create table public.a (id int primary key, v text)")
        node("create table public.b (id int primary key, n int)")
    pair.add_tables(*TABLES)
    pair.catch_up()
    _backlog(pair, 8)

    used = []
    apply = Replayer.apply

    def spy(self, *args, **kwargs):
        used.append(kwargs.get("ahead"))
        return apply(self, *args, **kwargs)

    monkeypatch.setattr(Replayer, "apply", spy)
    # Small multi-tick batches (about two ticks each), read by reader threads.
    worker = pair.worker(pgq_batch_collect_events="60", replay_read_ahead_events="0")
    with caplog.at_level(logging.DEBUG, logger="pgferry.apply.replay.batch"):
        pair.catch_up(worker)
    taken = [a for a in used if a is not None]
    assert len(used) >= 4
    assert len(taken) >= len(used) - 2, used  # the first batch, and the last tick's
    assert any(a.reads for a in taken)
    assert "is not this batch's" not in caplog.text
    assert "read ahead (its tables too: True)" in caplog.text
    for table in TABLES:
        pair.same(table)


def test_read_ahead_dropped_when_the_position_moved(pair) -> None:
    """The consumer's position moved on the provider after the read: the batch is taken
    the usual way and nothing is applied twice."""
    for node in (pair.root, pair.leaf):
        node("create table public.a (id int primary key, v text)")
        node("create table public.b (id int primary key, n int)")
    pair.add_tables(*TABLES)
    pair.catch_up()
    _backlog(pair, 4)
    worker = pair.worker(pgq_batch_collect_events="30", replay_read_ahead_events="0")
    assert worker.work() is True  # the first batch, the next one being read ahead
    # The leaf's position goes back one batch (as a restore would): the read-ahead batch
    # no longer starts there.
    back = pair.last_tick() - 2
    made = pair.root("select tick_time from ferry_queue.tick where tick_id = %s", (back,))[0][0]
    pair.leaf(
        "update ferry_node.local_state set last_tick_id = %s, last_tick_time = %s", (back, made)
    )
    pair.catch_up(worker)
    for table in TABLES:
        pair.same(table)
