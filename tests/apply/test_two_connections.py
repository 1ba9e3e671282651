"""A large batch applies some tables on a second connection to the node, exactly once.

The second connection's transaction commits first and records its tables in
``ferry.applied_part``; the main one records the tick.  A batch that fails between the two
commits is taken again and the tables already applied are skipped, not applied twice (a
delete applied twice would count a delete that found no row).
"""

from __future__ import annotations

import logging

import psycopg
import pytest

from pgferry.node import model

# Tables the second connection may take, and one it may not: a trigger that fires in replay
# (ENABLE ALWAYS) keeps ``m`` on the main connection.  Its deferred check fails the main
# transaction at its commit while the flag is set: after the second one has committed.
LEAF_EXTRA = """
create table public.fail_flag (on_ boolean);
create function public.fail_if_flagged() returns trigger language plpgsql as $$
begin
    if exists (select 1 from public.fail_flag where on_) then
        raise exception 'the main transaction fails at its commit';
    end if;
    return null;
end $$;
create constraint trigger fail_at_commit after insert or update on public.m
    deferrable initially deferred for each row execute function public.fail_if_flagged();
alter table public.m enable always trigger fail_at_commit;
"""

SETTINGS = {"replay_second_events": "100", "replay_read_ahead_events": "100"}


def _setup(pair) -> None:
    for name in ("m", "ins", "del"):
        ddl = f"create table public.{name} (id int primary key, v text)"
        pair.root(ddl)
        pair.leaf(ddl)
    pair.root("insert into m select g, 'm' || g from generate_series(1, 600) g")
    pair.root("insert into del select g, 'd' || g from generate_series(1, 300) g")
    pair.leaf(LEAF_EXTRA)
    pair.add_tables("public.m", "public.ins", "public.del")


def _batch(pair, round_: int) -> None:
    """One batch: 600 updates of m (main), 250 inserts into ins and 100 deletes from del."""
    pair.root(f"update m set v = 'r{round_}-' || id")
    first = (round_ - 1) * 250
    pair.root(
        f"insert into ins select g, 'i' || g from generate_series({first + 1}, {first + 250}) g"
    )
    pair.root(f"delete from del where id > {300 - round_ * 100}")


def _same(pair) -> None:
    for table in ("m", "ins", "del"):
        pair.same(table)


def _divergence(pair) -> tuple[int, int] | None:
    with psycopg.connect(pair.leaf_dsn, autocommit=True) as conn:
        node = model.require_node(conn, pair.queue)
        found = model.divergence(conn, pair.queue, node.worker_name)
    return (found.rows, found.deletes) if found is not None else None


# With ranges of 200 events, m's updates are read and applied in three ranges, in order.
@pytest.mark.parametrize("ranges", ["50000", "200"], ids=["whole", "in-ranges"])
def test_a_large_batch_applies_on_two_connections_exactly_once(make_pair, caplog, ranges) -> None:
    pair = make_pair(**SETTINGS, replay_read_range_events=ranges)
    _setup(pair)
    pair.catch_up(pair.worker())

    # A batch of 950 events, the first of a new worker: ins and del go to the second
    # connection.
    _batch(pair, 1)
    worker = pair.worker()
    with caplog.at_level(logging.DEBUG, logger="pgferry.apply"):
        pair.catch_up(worker)
    # Every transaction of the worker's connection ended: the batch committed.
    assert worker.conns.local.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    _same(pair)
    lines = [r.getMessage() for r in caplog.records if "second connection" in r.getMessage()]
    assert any("public.del, public.ins" in line for line in lines), lines
    parts = [r.getMessage() for r in caplog.records if "public.m part" in r.getMessage()]
    assert len(parts) == (3 if ranges == "200" else 0), parts
    assert pair.leaf("select count(*) from ferry.applied_part") == [(0,)]

    # The main transaction fails at its commit, after the second one committed.
    pair.leaf("insert into fail_flag values (true)")
    before = pair.last_tick()
    _batch(pair, 2)
    target = pair.tick()
    with pytest.raises(Exception, match="fails at its commit"):
        for _ in range(50):
            worker.work()
    worker.on_error(RuntimeError("the main transaction failed"))
    assert pair.last_tick() == before < target
    done = pair.leaf("select table_name from ferry.applied_part order by 1")
    assert done == [("public.del",), ("public.ins",)]
    # The second connection's tables are at the batch's end, the main one's not.
    pair.same("ins")
    pair.same("del")
    assert pair.leaf("select count(*) from m where v like 'r2-%'") == [(0,)]

    # Taken again: its tables applied before are skipped (a delete applied twice would
    # find no row and count it), the rest applied, the tick recorded.
    pair.leaf("truncate fail_flag")
    pair.catch_up(worker)
    _same(pair)
    assert pair.leaf("select count(*) from ferry.applied_part") == [(0,)]
    assert _divergence(pair) in (None, (0, 0))


@pytest.mark.parametrize(
    "second", ["5000", None, "older-schema"], ids=["below-the-size", "default-off", "older-schema"]
)
def test_a_batch_stays_on_one_connection(make_pair, caplog, second) -> None:
    """Below the size, by default, and on a node whose schema has no ferry.applied_part."""
    settings = {"replay_read_ahead_events": "100"}
    if second is not None:
        settings["replay_second_events"] = "100" if second == "older-schema" else second
    pair = make_pair(**settings)
    _setup(pair)
    if second == "older-schema":
        pair.leaf("drop table ferry.applied_part")
    worker = pair.catch_up(pair.worker())
    _batch(pair, 1)
    with caplog.at_level(logging.DEBUG, logger="pgferry.apply.replay.two_connections"):
        pair.catch_up(worker)
    _same(pair)
    assert not [r for r in caplog.records if "second connection" in r.getMessage()]
