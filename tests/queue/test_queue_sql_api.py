"""The ferry_queue SQL API: queues, ticks, batches, consumers, retry, rotation."""

from __future__ import annotations

import psycopg
import pytest
from queue_helpers import Scalar, take_batch, tick

from pgferry.polling import wait_until


def test_create_and_drop_queue(qconn: psycopg.Connection, scalar: Scalar) -> None:
    assert scalar("select ferry_queue.create_queue('q')") == 1
    assert scalar("select ferry_queue.create_queue('q')") == 0
    assert scalar("select last_tick_id from ferry_queue.get_queue_info('q')") is not None
    scalar("select ferry_queue.register_consumer('q', 'c')")
    with pytest.raises(psycopg.errors.RaiseException, match="has consumers"):
        scalar("select ferry_queue.drop_queue('q')")
    assert scalar("select ferry_queue.drop_queue('q', true)") == 1
    assert scalar("select count(*) from ferry_queue.queue") == 0
    assert scalar("select count(*) from pg_class where relname ~ '^event_[0-9]'") == 0


def test_unknown_queue_and_consumer_errors(qconn: psycopg.Connection, scalar: Scalar) -> None:
    for call in (
        "select ferry_queue.insert_event('nope', 't', 'd')",
        "select ferry_queue.ticker('nope')",
        "select ferry_queue.register_consumer('nope', 'c')",
        "select ferry_queue.next_batch('nope', 'c')",
        "select ferry_queue.drop_queue('nope')",
        "select * from ferry_queue.get_queue_info('nope')",
    ):
        with pytest.raises(psycopg.errors.NoDataFound, match="Unknown queue: nope"):
            scalar(call)
    scalar("select ferry_queue.create_queue('q')")
    with pytest.raises(psycopg.errors.NoDataFound, match="Consumer who not registered on queue q"):
        scalar("select ferry_queue.next_batch('q', 'who')")
    with pytest.raises(psycopg.errors.NoDataFound, match="not registered"):
        scalar("select ferry_queue.unregister_consumer('q', 'who')")


def test_insert_event_arities_and_batch(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    assert scalar("select ferry_queue.register_consumer('q', 'c')") == 1
    assert scalar("select ferry_queue.register_consumer('q', 'c')") == 0
    ids = [
        scalar("select ferry_queue.insert_event('q', 't3', 'd')"),
        scalar("select ferry_queue.insert_event('q', 't4', 'd', 'e1')"),
        scalar("select ferry_queue.insert_event('q', 't5', 'd', 'e1', 'e2')"),
        scalar("select ferry_queue.insert_event('q', 't6', 'd', 'e1', 'e2', 'e3')"),
        scalar("select ferry_queue.insert_event('q', 't7', 'd', 'e1', 'e2', 'e3', 'e4')"),
    ]
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert scalar("select ferry_queue.next_batch('q', 'c')") is None  # no tick yet
    tick(qconn, "q")
    batch = scalar("select ferry_queue.next_batch('q', 'c')")
    assert batch is not None
    assert scalar("select ferry_queue.next_batch('q', 'c')") == batch  # same until finished
    rows = qconn.execute("select * from ferry_queue.get_batch_events(%s)", (batch,)).fetchall()
    assert [r[4] for r in rows] == ["t3", "t4", "t5", "t6", "t7"]
    assert rows[-1][6:] == ("e1", "e2", "e3", "e4")
    assert rows[0][6:] == (None, None, None, None)
    info = qconn.execute("select * from ferry_queue.get_batch_info(%s)", (batch,)).fetchone()
    assert info is not None
    assert info[:2] == ("q", "c") and info[5] > info[4] and info[8] - info[7] == 5
    assert scalar("select ferry_queue.finish_batch(%s)", batch) == 1
    assert scalar("select ferry_queue.finish_batch(%s)", batch) == 0
    assert scalar("select ferry_queue.next_batch('q', 'c')") is None
    consumer = qconn.execute("select * from ferry_queue.get_consumer_info('q', 'c')").fetchone()
    assert consumer is not None and consumer[4] == info[5] and consumer[7] == 0


def test_batch_event_sql_runs_on_any_connection(
    qdb: str, qconn: psycopg.Connection, scalar: Scalar
) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    for i in range(10):
        scalar("select ferry_queue.insert_event('q', 't', %s)", str(i))
    tick(qconn, "q")
    batch = scalar("select ferry_queue.next_batch('q', 'c')")
    text = scalar("select ferry_queue.batch_event_sql(%s)", batch)
    with psycopg.connect(qdb) as other:
        wrapped = f"select * from ({text}) e where ev_id between 3 and 5 order by ev_id"
        rows = other.execute(wrapped).fetchall()  # type: ignore[arg-type]
        cols = [c.name for c in other.execute(text).description or ()]  # type: ignore[arg-type]
    assert [r[0] for r in rows] == [3, 4, 5]
    assert cols == [
        "ev_id",
        "ev_time",
        "ev_txid",
        "ev_retry",
        "ev_type",
        "ev_data",
        "ev_extra1",
        "ev_extra2",
        "ev_extra3",
        "ev_extra4",
    ]


def test_batch_cursor_streams_with_filter(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    qconn.execute(
        "select ferry_queue.insert_event('q', 't', i::text, case when i % 2 = 0 then 'even' end)"
        " from generate_series(1, 50) i"
    )
    tick(qconn, "q")
    batch = scalar("select ferry_queue.next_batch('q', 'c')")
    with qconn.transaction():
        first = qconn.execute(
            "select ev_data from ferry_queue.get_batch_cursor(%s, 'my cur', 10,"
            " 'ev_extra1 = ''even''')",
            (batch,),
        ).fetchall()
        rest = qconn.execute('fetch all from "my cur"').fetchall()
    data = [int(r[0]) for r in first + rest]
    assert len(first) == 10 and data == list(range(2, 51, 2))


def test_ticker_rules(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.set_queue_config('q', 'ticker_max_lag', '1 hour')")
    scalar("select ferry_queue.set_queue_config('q', 'queue_ticker_idle_period', '1 hour')")
    scalar("select ferry_queue.set_queue_config('q', 'ticker_max_count', '5')")
    tick(qconn, "q")
    assert scalar("select ferry_queue.ticker('q')") is None  # idle, nothing due
    for _ in range(4):
        scalar("select ferry_queue.insert_event('q', 't', 'd')")
    assert scalar("select ferry_queue.ticker('q')") is None  # 4 < max_count
    scalar("select ferry_queue.insert_event('q', 't', 'd')")
    assert scalar("select ferry_queue.ticker('q')") is not None  # 5 events: tick
    scalar("select ferry_queue.insert_event('q', 't', 'd')")
    scalar("select ferry_queue.set_queue_config('q', 'ticker_max_lag', '0')")
    assert scalar("select ferry_queue.ticker('q')") is not None  # max lag passed
    scalar("select ferry_queue.set_queue_config('q', 'ticker_idle_period', '0')")
    assert scalar("select ferry_queue.ticker()") == 1  # idle period passed
    scalar("select ferry_queue.set_queue_config('q', 'ticker_paused', 'true')")
    assert scalar("select ferry_queue.ticker()") == 0
    with pytest.raises(psycopg.errors.RaiseException, match="paused"):
        scalar("select ferry_queue.ticker('q')")
    with pytest.raises(psycopg.errors.RaiseException, match="Unknown queue setting"):
        scalar("select ferry_queue.set_queue_config('q', 'queue_name', 'x')")


def test_force_tick_returns_last_tick(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    last = scalar("select ferry_queue.force_tick('q')")
    assert scalar("select ferry_queue.ticker('q')") == last + 1  # type: ignore[operator]
    assert scalar("select ferry_queue.ticker('q')") is None  # the force is used up


def test_external_ticker(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.set_queue_config('q', 'external_ticker', 'true')")
    assert scalar("select ferry_queue.ticker()") == 0
    with pytest.raises(psycopg.errors.RaiseException, match="external ticker"):
        scalar("select ferry_queue.ticker('q')")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    scalar("select ferry_queue.insert_event('q', 't', 'd')")
    assert scalar("select ferry_queue.ticker('q', 100, now(), 1000)") == 100
    assert scalar("select last_tick_id from ferry_queue.get_queue_info('q')") == 100
    batch = scalar("select ferry_queue.next_batch('q', 'c')")
    assert scalar("select count(*) from ferry_queue.get_batch_events(%s)", batch) == 1
    # The event sequence moved forward past the provider's position.
    assert scalar("select ferry_queue.insert_event('q', 't', 'd')") > 1000  # type: ignore[operator]


def test_register_consumer_at_repositions(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    start = scalar("select last_tick_id from ferry_queue.get_queue_info('q')")
    scalar("select ferry_queue.insert_event('q', 't', 'a')")
    tick(qconn, "q")
    assert [e[5] for e in take_batch(qconn, "q", "c") or []] == ["a"]
    assert scalar("select ferry_queue.next_batch('q', 'c')") is None
    assert scalar("select ferry_queue.register_consumer_at('q', 'c', %s)", start) == 0
    assert [e[5] for e in take_batch(qconn, "q", "c") or []] == ["a"]
    assert scalar("select ferry_queue.register_consumer_at('q', 'd', %s)", start) == 1
    with pytest.raises(psycopg.errors.RaiseException, match="Tick 999 not found"):
        scalar("select ferry_queue.register_consumer_at('q', 'c', 999)")


def test_next_batch_custom_merges_ticks(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    for i in range(5):
        scalar("select ferry_queue.insert_event('q', 't', %s)", str(i))
        tick(qconn, "q")
    batch = scalar("select ferry_queue.next_batch_custom('q', 'c', null, 3, null)")
    assert scalar("select count(*) from ferry_queue.get_batch_events(%s)", batch) == 3
    scalar("select ferry_queue.finish_batch(%s)", batch)
    # Only two events left: min_count 3 is not reached, a time span of 0 is.
    assert scalar("select ferry_queue.next_batch_custom('q', 'c', null, 3, null)") is None
    assert scalar("select ferry_queue.next_batch_custom('q', 'c', '1 hour', null, null)") is None
    batch = scalar("select ferry_queue.next_batch_custom('q', 'c', null, null, '0')")
    assert scalar("select count(*) from ferry_queue.get_batch_events(%s)", batch) == 1


def test_retry_redelivers_to_owner_only(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.register_consumer('q', 'c1')")
    scalar("select ferry_queue.register_consumer('q', 'c2')")
    ev = scalar("select ferry_queue.insert_event('q', 't', 'payload')")
    tick(qconn, "q")
    batch = scalar("select ferry_queue.next_batch('q', 'c1')")
    assert scalar("select ferry_queue.event_retry(%s, %s, 0)", batch, ev) == 1
    assert scalar("select ferry_queue.event_retry(%s, %s, 0)", batch, ev) == 0
    scalar("select ferry_queue.finish_batch(%s)", batch)
    assert len(take_batch(qconn, "q", "c2") or []) == 1
    assert scalar("select ferry_queue.maint_retry_events()") == 1
    assert scalar("select ferry_queue.maint_retry_events()") == 0
    tick(qconn, "q")
    again = take_batch(qconn, "q", "c1")
    assert again is not None and [(e[0], e[3], e[5]) for e in again] == [(ev, 1, "payload")]
    assert take_batch(qconn, "q", "c2") == []  # not for the other consumer


def test_rotation_waits_for_lagging_consumer(qconn: psycopg.Connection, scalar: Scalar) -> None:
    scalar("select ferry_queue.create_queue('q')")
    scalar("select ferry_queue.set_queue_config('q', 'rotation_period', '0')")
    scalar("select ferry_queue.register_consumer('q', 'fast')")
    scalar("select ferry_queue.register_consumer('q', 'slow')")
    sent = []

    def rotate() -> None:
        for func, arg in qconn.execute("select * from ferry_queue.maint_operations()").fetchall():
            if arg is None:
                scalar(f"select {func}()")
            else:
                scalar(f"select {func}(%s)", arg)

    for round_ in range(8):
        sent.append(scalar("select ferry_queue.insert_event('q', 't', %s)", str(round_)))
        tick(qconn, "q")
        take_batch(qconn, "q", "fast")
        rotate()
        rotate()
    # The slow consumer kept the rotation from emptying tables it still needs.
    assert scalar("select queue_cur_table from ferry_queue.queue") in (0, 1, 2)
    got = []
    while (events := take_batch(qconn, "q", "slow")) is not None:
        got += [e[0] for e in events]
    assert got == sent
    # Once everybody has passed, rotation proceeds and old events are truncated: a table is
    # emptied once every consumer's tick sees past its last switch, and a tick's snapshot is
    # the cluster's, so a transaction still running in another database of the cluster
    # delays it by a few rounds.
    before = scalar("select queue_switch_time from ferry_queue.queue")

    def truncated() -> bool:
        tick(qconn, "q")
        take_batch(qconn, "q", "fast")
        take_batch(qconn, "q", "slow")
        rotate()
        return bool(
            scalar("select queue_switch_time from ferry_queue.queue") != before
            and scalar("select count(*) from ferry_queue.event") < len(sent)
        )

    wait_until(truncated, timeout=60, interval=0.1, what="the rotation to empty old events")


@pytest.mark.parametrize("call", ["next_batch('q', 'c')", "next_batch_upto('q', 'c', 1000, 1)"])
def test_a_batch_opens_with_one_update_of_the_consumer(qdb: str, call: str) -> None:
    """One row version per next_batch call, with or without a batch (queue version 13)."""
    with psycopg.connect(qdb, autocommit=True) as conn:
        conn.execute("select ferry_queue.create_queue('q')")
        conn.execute("select ferry_queue.register_consumer('q', 'c')")
        conn.execute("select ferry_queue.insert_event('q', 't', 'd')")
        conn.execute("select ferry_queue.force_tick('q')")
        conn.execute("select ferry_queue.ticker('q')")
    with psycopg.connect(qdb) as conn:  # one transaction: its own table counters

        def updates() -> int:
            row = conn.execute(
                "select n_tup_upd from pg_stat_xact_all_tables"
                " where relid = 'ferry_queue.subscription'::regclass"
            ).fetchone()
            return row[0] if row else 0

        before = updates()
        batch = conn.execute(f"select ferry_queue.{call}").fetchone()[0]
        assert batch is not None and updates() == before + 1
        conn.execute("select ferry_queue.finish_batch(%s)", (batch,))
        after_finish = updates()
        assert conn.execute(f"select ferry_queue.{call}").fetchone()[0] is None
        assert updates() == after_finish + 1
        assert conn.execute(
            "select sub_batch is null and sub_active = now() from ferry_queue.subscription"
        ).fetchone()[0]
