"""The tick decision of queue version 10: a tick as soon as events wait, none while idle.

An idle queue writes nothing when asked (no transaction id: no lock, no WAL); it ticks once
per idle period, without the doubling interval of earlier versions; events committed late
by a transaction that was running at the last tick get a tick of their own; ticker_round
says when events wait; force_tick wakes a listening ticker.  Version 12: the late-commit
check of a tick stops once settled, and still finds a transaction that commits late.
"""

from __future__ import annotations

import psycopg
from queue_helpers import Scalar, take_batch, tick


def _queue(scalar: Scalar, **config: str) -> None:
    scalar("select ferry_queue.create_queue('q')")
    for key, value in config.items():
        scalar("select ferry_queue.set_queue_config('q', %s, %s)", key, value)


def test_new_queue_ticks_after_50_ms(scalar: Scalar) -> None:
    _queue(scalar)
    assert scalar("select queue_ticker_max_lag from ferry_queue.queue") == scalar(
        "select interval '50 milliseconds'"
    )


def test_idle_call_takes_no_transaction_id(qdb: str, scalar: Scalar) -> None:
    _queue(scalar, ticker_idle_period="1 hour")
    with psycopg.connect(qdb) as conn:  # one transaction, as the daemon's autocommit call
        assert conn.execute("select ferry_queue.ticker('q')").fetchone() == (None,)
        assert conn.execute("select * from ferry_queue.ticker_round()").fetchone() == (0, 0)
        assert conn.execute("select pg_current_xact_id_if_assigned()").fetchone() == (None,)
    # A due tick does lock and write.
    scalar("select ferry_queue.set_queue_config('q', 'ticker_max_count', '1')")
    scalar("select ferry_queue.insert_event('q', 't', 'd')")
    with psycopg.connect(qdb) as conn:
        assert conn.execute("select ferry_queue.ticker('q')").fetchone()[0] is not None  # type: ignore[index]
        assert conn.execute("select pg_current_xact_id_if_assigned()").fetchone()[0] is not None  # type: ignore[index]


def test_waiting_events_tick_after_max_lag(qconn: psycopg.Connection, scalar: Scalar) -> None:
    _queue(scalar, ticker_max_lag="1 hour", ticker_idle_period="1 hour", ticker_max_count="3")
    tick(qconn, "q")
    scalar("select ferry_queue.insert_event('q', 't', 'd')")
    # One event below max_count and max_lag: no tick yet, but the round says it waits.
    assert scalar("select ticks || '/' || waiting from ferry_queue.ticker_round()") == "0/1"
    scalar("select ferry_queue.set_queue_config('q', 'ticker_max_lag', '0')")
    assert scalar("select ticks || '/' || waiting from ferry_queue.ticker_round()") == "1/1"
    # Nothing new since: the queue is idle again.
    assert scalar("select ticks || '/' || waiting from ferry_queue.ticker_round()") == "0/0"


def test_waiting_consumer_gets_its_tick_at_once(qconn: psycopg.Connection, scalar: Scalar) -> None:
    # A consumer that has finished the last tick and holds no batch waits for the next:
    # the queue ticks for the first event, whatever max_lag.  One busy with a batch, or
    # behind (stopped), does not make the queue tick before max_lag.
    _queue(scalar, ticker_max_lag="1 hour", ticker_idle_period="1 hour", ticker_max_count="1000")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    first = tick(qconn, "q")
    while take_batch(qconn, "q", "c") is not None:
        pass
    scalar("select ferry_queue.insert_event('q', 't', 'a')")
    assert scalar("select ticks || '/' || waiting from ferry_queue.ticker_round()") == "1/1"
    # Busy: the batch up to that tick is open while the next event comes.
    batch = scalar("select ferry_queue.next_batch('q', 'c')")
    assert batch is not None
    scalar("select ferry_queue.insert_event('q', 't', 'b')")
    assert scalar("select ticks || '/' || waiting from ferry_queue.ticker_round()") == "0/1"
    # Finished: waiting again, the event waiting since gets its tick.
    scalar("select ferry_queue.finish_batch(%s)", batch)
    assert scalar("select ticks || '/' || waiting from ferry_queue.ticker_round()") == "1/1"
    # Behind (a stopped consumer): at most that one tick, then max_lag again.
    scalar("select ferry_queue.insert_event('q', 't', 'c')")
    assert scalar("select ticks || '/' || waiting from ferry_queue.ticker_round()") == "0/1"
    assert scalar("select max(tick_id) from ferry_queue.tick") == first + 2


def test_idle_queue_does_not_double_its_ticks(qconn: psycopg.Connection, scalar: Scalar) -> None:
    # Earlier versions ticked an idle queue again once twice the last gap had passed; with
    # two ticks in a row that would be at once.  Now only the idle period counts.
    _queue(scalar, ticker_max_lag="0", ticker_idle_period="1 hour")
    tick(qconn, "q")
    tick(qconn, "q")
    assert scalar("select pg_sleep(0.05)") == ""
    assert scalar("select ferry_queue.ticker('q')") is None
    scalar("select ferry_queue.set_queue_config('q', 'ticker_idle_period', '0')")
    assert scalar("select ferry_queue.ticker('q')") is not None


def test_late_commit_gets_its_tick(qdb: str, qconn: psycopg.Connection, scalar: Scalar) -> None:
    _queue(scalar, ticker_max_lag="0", ticker_idle_period="1 hour")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    with psycopg.connect(qdb) as writer:
        writer.execute("select ferry_queue.insert_event('q', 't', 'late')")
        # The tick counts the open transaction's event but cannot see it.
        assert scalar("select ferry_queue.ticker('q')") is not None
        assert scalar("select ferry_queue.ticker('q')") is None  # still running: nothing due
        writer.commit()
    # Committed now: no newer event exists, yet the queue ticks once for it.
    assert scalar("select ticks from ferry_queue.ticker_round()") == 1
    assert scalar("select ticks from ferry_queue.ticker_round()") == 0
    events = []
    while (batch := take_batch(qconn, "q", "c")) is not None:
        events += [row[5] for row in batch]
    assert events == ["late"]


def test_force_tick_wakes_a_listener(qdb: str, scalar: Scalar) -> None:
    _queue(scalar)
    with psycopg.connect(qdb, autocommit=True) as listener:
        listener.execute("listen ferry_queue_ticker")
        scalar("select ferry_queue.force_tick('q')")
        got = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert got == ["q"]


def _event_scans(conn: psycopg.Connection) -> int:
    """Index scans of the event partitions so far in ``conn``'s open transaction."""
    row = conn.execute(
        "select coalesce(sum(idx_scan), 0)::int from pg_stat_xact_user_tables"
        " where schemaname = 'ferry_queue' and relname like 'event\\_%'"
    ).fetchone()
    assert row is not None
    return row[0]


def test_settled_late_check_is_not_repeated(
    qdb: str, qconn: psycopg.Connection, scalar: Scalar
) -> None:
    # Version 12: once no transaction that was running at the last tick is left, one more
    # check settles it and idle rounds stop looking at the events.
    _queue(scalar, ticker_max_lag="0", ticker_idle_period="1 hour")
    tick(qconn, "q")
    with psycopg.connect(qdb) as conn:  # one transaction: its statistics count every scan
        rounds = []
        for _ in range(50):
            before = _event_scans(conn)
            assert conn.execute("select * from ferry_queue.ticker_round()").fetchone() == (0, 0)
            rounds.append(_event_scans(conn) - before)
            if rounds[-1] == 0:
                break
        assert rounds[0] > 0  # the first round does check for late commits
        assert rounds[-1] == 0, rounds
        for _ in range(3):
            before = _event_scans(conn)
            assert conn.execute("select * from ferry_queue.ticker_round()").fetchone() == (0, 0)
            assert _event_scans(conn) == before
        assert conn.execute("select pg_current_xact_id_if_assigned()").fetchone() == (None,)
    # A settled queue still ticks for a new event, at once with max_lag 0.
    scalar("select ferry_queue.insert_event('q', 't', 'new')")
    assert scalar("select ticks || '/' || waiting from ferry_queue.ticker_round()") == "1/1"


def test_late_commit_ticks_after_many_idle_rounds(
    qdb: str, qconn: psycopg.Connection, scalar: Scalar
) -> None:
    # The check stays unsettled while a transaction running at the tick may still commit.
    _queue(scalar, ticker_max_lag="0", ticker_idle_period="1 hour")
    scalar("select ferry_queue.register_consumer('q', 'c')")
    tick(qconn, "q")
    with psycopg.connect(qdb) as writer:
        writer.execute("select ferry_queue.insert_event('q', 't', 'late')")
        assert scalar("select ferry_queue.ticker('q')") is not None
        for _ in range(5):
            assert scalar("select ticks from ferry_queue.ticker_round()") == 0
        writer.commit()
    assert scalar("select ticks from ferry_queue.ticker_round()") == 1
    events = []
    while (batch := take_batch(qconn, "q", "c")) is not None:
        events += [row[5] for row in batch]
    assert events == ["late"]


def test_late_events_one_check_for_the_ticker_and_the_waits(
    qdb: str, qconn: psycopg.Connection, scalar: Scalar
) -> None:
    # ferry_queue.late_events: the events committed now that a tick's snapshot does not
    # see, from its xip list and above its xmax; tick_due asks it whether there is one,
    # wait-root (queue.ticks.late_events) how many.
    from pgferry.queue.ticks import late_events

    _queue(scalar, ticker_max_lag="1 hour", ticker_idle_period="1 hour")
    with psycopg.connect(qdb) as running, psycopg.connect(qdb) as open_after:
        for i in range(3):
            running.execute("select ferry_queue.insert_event('q', 't', %s)", (f"xip{i}",))
        first = tick(qconn, "q")  # sees none of them: `running` is in its xip list
        running.commit()
        for i in range(2):  # a transaction after the tick, committed
            scalar("select ferry_queue.insert_event('q', 't', %s)", f"above{i}")
        open_after.execute("select ferry_queue.insert_event('q', 't', 'open')")

        def check(limit: int, steps: int | None) -> str:
            return scalar(
                "select l.events || '/' || l.whole || '/' || l.later"
                "  from ferry_queue.queue q join ferry_queue.tick t on t.tick_queue = q.queue_id,"
                "       ferry_queue.late_events(q.queue_id, t.tick_snapshot,"
                "                               pg_current_snapshot(), %s, %s) l"
                " where q.queue_name = 'q' and t.tick_id = %s",
                limit,
                steps,
                first,
            )

        assert check(1000, None) == "5/true/false"  # the open one's event is not seen yet
        assert check(4, None) == "4/false/false"  # counting stops at the limit
        assert check(1, 100) == "1/false/false"  # the ticker's question: is there one
        assert check(1000, 0) == "3/false/false"  # nothing above xmax looked at
        assert late_events(qconn, "q", first) == 5
        open_after.commit()
    assert late_events(qconn, "q", first) == 6
    # A tick that sees them all leaves none late.
    newest = tick(qconn, "q")
    assert late_events(qconn, "q", newest) == 0
