"""Exactly-once apply: a crash between the local commit and finish_batch applies nothing twice."""

from __future__ import annotations

import pytest

from pgferry.queue import batches as queue_batches

COUNTER = """
create table applied (n bigint);
insert into applied values (0);
create function count_applied() returns trigger language plpgsql as $$
begin update public.applied set n = n + 1; return null; end $$;
create trigger count_applied after insert or update or delete on public.t
    for each row execute function count_applied();
-- replay runs as replica: only an ALWAYS trigger sees it
alter table public.t enable always trigger count_applied;
"""


FINISHES = ("finish_batch", "finish_batch_and_wake")


def test_crash_before_finish_is_not_applied_twice(pair, monkeypatch) -> None:
    pair.root("create table public.t (id int primary key, v int)")
    pair.leaf("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t")
    pair.catch_up()
    pair.leaf(COUNTER)
    pair.root("insert into t select g, 0 from generate_series(1, 10) g")
    tick = pair.tick()

    class Crash(Exception):
        pass

    def crash(conn, batch_id, **flags):
        raise Crash("killed before finish_batch")

    # Both ways a worker finishes a batch (with or without waking the ticker).
    real = {name: getattr(queue_batches, name) for name in FINISHES}
    for name in FINISHES:
        monkeypatch.setattr(queue_batches, name, crash)
    worker = pair.worker()
    with pytest.raises(Crash):
        worker.work()
    worker.conns.close()
    assert pair.last_tick() == tick  # the apply committed
    assert pair.leaf("select n from applied") == [(10,)]

    for name in FINISHES:
        monkeypatch.setattr(queue_batches, name, real[name])
    restarted = pair.worker()
    assert restarted.work() is True  # same batch again: finished, not applied
    assert pair.leaf("select n from applied") == [(10,)]
    pair.catch_up(restarted)
    assert pair.leaf("select n from applied") == [(10,)]
    pair.same("t")


RECORD_COMMITS = """
create table public.sub_writes (synchronous_commit text);
create function public.record_sub_write() returns trigger language plpgsql as $$
begin
    insert into public.sub_writes values (current_setting('synchronous_commit'));
    return null;
end $$;
create trigger record_sub_write after update on ferry_queue.subscription
    for each row execute function public.record_sub_write();
"""


def test_batch_open_and_finish_do_not_wait_for_the_flush(pair) -> None:
    # The node's recorded tick is the truth: the provider's record of the batch (opened,
    # finished) may be lost in a crash, so its commits need not wait for the WAL flush.
    pair.root("create table public.t (id int primary key, v int)")
    pair.leaf("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t")
    pair.catch_up()
    db = pair.root("select current_database()")[0][0]
    pair.root(f'alter database "{db}" set synchronous_commit = on')
    pair.root(RECORD_COMMITS)
    pair.root("insert into t select g, g from generate_series(1, 5) g")
    tick = pair.tick()
    worker = pair.worker()  # its sessions start with the database's setting: on
    worker.work()
    assert pair.last_tick() == tick
    assert pair.leaf("select count(*) from t") == [(5,)]
    # The batch's opening and its finish each wrote the consumer's row, both unflushed.
    assert pair.root("select synchronous_commit, count(*) from sub_writes group by 1") == [
        ("off", 2)
    ]
    provider = worker.conns.provider
    assert provider is not None
    assert provider.execute("show synchronous_commit").fetchone() == ("on",)  # local only
    worker.conns.close()


def test_reset_skips_to_the_newest_tick(pair) -> None:
    from pgferry.apply.positions import reposition

    pair.root("create table public.t (id int primary key, v int)")
    pair.leaf("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t")
    worker = pair.catch_up()
    pair.root("insert into t values (1, 1)")
    newest = pair.tick()
    pair.leaf("update ferry_node.local_state set last_tick_id = last_tick_id - 1")
    reposition(pair.leaf_cfg, reset=True)
    assert pair.last_tick() == newest
    pair.root("insert into t values (2, 2)")
    pair.catch_up(worker)
    # The skipped batch is not applied (a resync would bring it), later ones are.
    assert pair.leaf("select id from t order by id") == [(2,)]
