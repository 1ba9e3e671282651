"""The one rule of a batch's size: ``ferry_queue.batch_tick`` and its openers.

Ticks are made by an external ticker at chosen times and event positions, so that each
case names the tick it must end at: a consumer behind takes one batch of up to ``most``
events (or all there are), one tick waiting is one batch, ``pgq_keep_lag`` takes only old
enough ticks, ``pgq_batch_collect_interval`` a span at least that long, ``upto`` never
ends later.  The worker's opening (:func:`queue_batches.take_batch`) ends where the
read-ahead's question (:func:`queue_batches.batch_tick`) says, and the PgQ calls
(next_batch, next_batch_custom, next_batch_upto) keep their rules.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from queue_helpers import Scalar

from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import BatchRule

START = 10  # the consumer's position
MINUTE = timedelta(minutes=1)


def _queue(conn: psycopg.Connection, ticks: list[tuple[int, int]]) -> None:
    """Queue 'q' with consumer 'c' at tick START, then ticks START + 1, ... each
    ``(minutes ago, events since the previous tick)``."""
    conn.execute("select ferry_queue.create_queue('q')")
    conn.execute("select ferry_queue.set_queue_config('q', 'external_ticker', 'true')")
    conn.execute("select ferry_queue.ticker('q', %s, now() - interval '1 hour', 100)", (START,))
    conn.execute("select ferry_queue.register_consumer('q', 'c')")
    seq = 100
    for n, (ago, events) in enumerate(ticks, start=START + 1):
        seq += events
        conn.execute(
            "select ferry_queue.ticker('q', %s, now() - %s * interval '1 minute', %s)",
            (n, ago, seq),
        )


def _tick(conn: psycopg.Connection, rule: BatchRule, after: int = START) -> int | None:
    chosen = queue_batches.batch_tick(conn, "q", after, rule)
    return None if chosen is None else chosen[0]


def _opened(conn: psycopg.Connection, rule: BatchRule) -> tuple[int | None, int]:
    """The closing tick of the batch take_batch opens (then finished), and the ticks it
    says wait."""
    batch, waiting = queue_batches.take_batch(conn, "q", "c", rule)
    if batch is None:
        return None, waiting
    queue_batches.finish_batch(conn, batch.batch_id)
    return batch.tick_id, waiting


def test_a_consumer_behind_takes_up_to_most_events(qconn: psycopg.Connection) -> None:
    _queue(qconn, [(9, 5), (8, 5), (7, 5), (6, 5)])  # 5, 10, 15, 20 events
    assert queue_batches.batch_tick(qconn, "q", START, BatchRule(most=12)) == (13, 15)
    assert _tick(qconn, BatchRule(most=10)) == 12  # exactly reached
    assert _tick(qconn, BatchRule(most=100)) == 14  # fewer wait: all of them
    assert _tick(qconn, BatchRule(most=1)) == 11
    assert _tick(qconn, BatchRule()) == 11  # no size asked: the next tick
    assert _tick(qconn, BatchRule(most=100), after=13) == 14  # one waits: that one
    assert _tick(qconn, BatchRule(most=100), after=14) is None  # none waits
    # The opening ends where the question said, and says how many ticks waited.
    assert _opened(qconn, BatchRule(most=12)) == (13, 4)
    assert _opened(qconn, BatchRule(most=12)) == (14, 1)
    assert _opened(qconn, BatchRule(most=12)) == (None, 0)


def test_idle_ticks_are_taken_one_at_a_time(qconn: psycopg.Connection) -> None:
    _queue(qconn, [(3, 0), (2, 0), (1, 4)])
    assert _tick(qconn, BatchRule(most=100)) == 13  # the ticks that close events
    assert _tick(qconn, BatchRule(most=100), after=11) == 13
    # Nothing but idle ticks: the next one (no event to gather into one batch).
    qconn.execute("select ferry_queue.ticker('q', 14, now(), 104)")
    qconn.execute("select ferry_queue.ticker('q', 15, now(), 104)")
    assert _tick(qconn, BatchRule(most=100), after=13) == 14


def test_keep_lag_takes_only_old_enough_ticks(qconn: psycopg.Connection) -> None:
    _queue(qconn, [(30, 5), (20, 5), (10, 5), (0, 5)])
    lag = 15 * MINUTE
    assert _tick(qconn, BatchRule(min_lag=lag)) == 11
    # Behind: the old enough ticks up to most events, never a young one.
    assert _tick(qconn, BatchRule(most=100, min_lag=lag)) == 12
    assert _tick(qconn, BatchRule(most=6, min_lag=lag)) == 12
    assert _tick(qconn, BatchRule(most=100, min_lag=lag), after=12) is None
    assert _tick(qconn, BatchRule(most=100, min_lag=lag, one_tick=True)) == 11
    assert _tick(qconn, BatchRule(most=100, min_lag=45 * MINUTE)) is None
    # Every tick after the position waits, old enough or not.
    assert _opened(qconn, BatchRule(most=100, min_lag=lag)) == (12, 4)


def test_collect_interval_spans_at_least_that_long(qconn: psycopg.Connection) -> None:
    _queue(qconn, [(50, 1), (45, 1), (30, 1), (25, 1)])  # START was an hour ago
    assert _tick(qconn, BatchRule(most=1, min_interval=20 * MINUTE)) == 13
    assert _tick(qconn, BatchRule(min_interval=32 * MINUTE)) == 14
    assert _tick(qconn, BatchRule(min_interval=2 * 60 * MINUTE)) is None
    # Waiting at a tick (one_tick) wins over the interval.
    assert _tick(qconn, BatchRule(min_interval=32 * MINUTE, one_tick=True)) == 11


def test_one_tick_ends_at_the_next_tick(qconn: psycopg.Connection) -> None:
    _queue(qconn, [(3, 5), (2, 5), (1, 5)])
    assert _tick(qconn, BatchRule(most=100, one_tick=True)) == 11
    assert _opened(qconn, BatchRule(most=100, one_tick=True)) == (11, 3)


def test_the_pgq_calls_keep_their_rules(qconn: psycopg.Connection, scalar: Scalar) -> None:
    _queue(qconn, [(9, 5), (8, 5), (7, 5), (6, 5)])

    def closing(call: str) -> int | None:
        batch = scalar(f"select ferry_queue.{call}")
        if batch is None:
            return None
        tick = scalar("select tick_id from ferry_queue.get_batch_info(%s)", batch)
        scalar("select ferry_queue.rewind_consumer('q', 'c', %s)", START)
        return tick  # type: ignore[return-value]

    assert closing("next_batch('q', 'c')") == 11
    # A fixed count: not reached is no batch (next_batch_custom is not sized).
    assert closing("next_batch_custom('q', 'c', null, 12, null)") == 13
    assert closing("next_batch_custom('q', 'c', null, 100, null)") is None
    assert closing("next_batch_upto('q', 'c', 12, 100)") == 12
    assert closing("next_batch_upto('q', 'c', 14, 7)") == 12
    assert closing("next_batch_upto('q', 'c', 9, 1)") is None


def test_an_open_batch_is_handed_out_again(qconn: psycopg.Connection) -> None:
    _queue(qconn, [(3, 5), (2, 5)])
    first, waiting = queue_batches.take_batch(qconn, "q", "c", BatchRule(most=1))
    assert first is not None and first.tick_id == 11 and waiting == 2
    again, _ = queue_batches.take_batch(qconn, "q", "c", BatchRule(most=100))
    assert again is not None and again.batch_id == first.batch_id and again.tick_id == 11


def test_a_position_whose_tick_is_gone_raises(qconn: psycopg.Connection, scalar: Scalar) -> None:
    _queue(qconn, [(3, 5)])
    assert queue_batches.batch_tick(qconn, "q", 7, BatchRule(most=10)) is None
    qconn.execute("delete from ferry_queue.tick where tick_id = %s", (START,))
    with pytest.raises(psycopg.errors.RaiseException, match=f"Last tick {START} .* is gone"):
        queue_batches.take_batch(qconn, "q", "c", BatchRule(most=10))


@pytest.mark.pure
@pytest.mark.parametrize(
    ("rule", "args"),
    [
        (BatchRule(), (None, None, None, False)),
        (BatchRule(most=50), (None, 50, None, True)),
        (BatchRule(most=50, min_lag=MINUTE), (MINUTE, 50, None, True)),
        (BatchRule(most=50, min_interval=MINUTE), (None, None, MINUTE, False)),
        (BatchRule(most=50, min_lag=MINUTE, one_tick=True), (MINUTE, None, None, False)),
        (BatchRule(most=50, min_interval=MINUTE, one_tick=True), (None, None, None, False)),
    ],
)
def test_a_rule_as_the_queue_reads_it(rule: BatchRule, args: tuple) -> None:
    assert rule.args() == args
