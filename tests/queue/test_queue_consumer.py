"""The Python consumer class: register, loop over batches, retry, commit semantics."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from queue_helpers import tick

from pgferry.errors import QueueError
from pgferry.queue.consumer import BatchReader, Consumer


@pytest.fixture
def queue(qconn: psycopg.Connection) -> psycopg.Connection:
    qconn.execute("select ferry_queue.create_queue('q')")
    return qconn


def _insert(conn: psycopg.Connection, *values: str) -> None:
    for value in values:
        conn.execute("select ferry_queue.insert_event('q', 'x', %s)", (value,))


def test_loop_over_batches(qdb: str, queue: psycopg.Connection) -> None:
    with Consumer(qdb, "q", "c", fetch_size=3) as consumer:
        assert consumer.register() is True
        assert consumer.register() is False
        _insert(queue, *map(str, range(10)))
        tick(queue, "q")
        _insert(queue, "late")
        tick(queue, "q")
        seen: list[tuple[int, str | None]] = []

        def handler(batch: BatchReader) -> None:
            seen.extend((batch.info.tick_id, ev.ev_data) for ev in batch.events())

        assert consumer.run(handler) == 2
        assert [data for _, data in seen] == [*map(str, range(10)), "late"]
        assert len({t for t, _ in seen}) == 2
        assert consumer.process_batch(handler) is None
        info = consumer.info()
        assert info["pending_events"] == 0 and info["current_batch"] is None


def test_failed_handler_repeats_the_batch(qdb: str, queue: psycopg.Connection) -> None:
    with Consumer(qdb, "q", "c") as consumer:
        consumer.register()
        _insert(queue, "a", "b")
        tick(queue, "q")

        def failing(batch: BatchReader) -> None:
            list(batch.events())
            raise RuntimeError("apply failed")

        with pytest.raises(RuntimeError):
            consumer.process_batch(failing)
        got: list[str | None] = []
        info = consumer.process_batch(lambda b: got.extend(e.ev_data for e in b.events()))
        assert got == ["a", "b"] and info is not None


def test_tagged_events_come_back(qdb: str, queue: psycopg.Connection) -> None:
    with Consumer(qdb, "q", "c") as consumer:
        consumer.register()
        _insert(queue, "keep", "again")
        tick(queue, "q")

        def tag(batch: BatchReader) -> None:
            for ev in batch.events():
                if ev.ev_data == "again":
                    ev.tag_retry(0)

        consumer.process_batch(tag)
        assert queue.execute("select ferry_queue.maint_retry_events()").fetchone() == (1,)
        tick(queue, "q")
        got: list[tuple] = []
        consumer.process_batch(lambda b: got.extend((e.ev_data, e.ev_retry) for e in b.events()))
        assert got == [("again", 1)]


def test_custom_batches_and_filters(qdb: str, queue: psycopg.Connection) -> None:
    with Consumer(qdb, "q", "c", min_count=4, min_interval=timedelta(hours=1)) as consumer:
        consumer.register()
        for i in range(6):
            queue.execute(
                "select ferry_queue.insert_event('q', 'x', %s, %s)", (str(i), f"t{i % 2}")
            )
            tick(queue, "q")
        got: list[str | None] = []
        consumer.process_batch(
            lambda b: got.extend(e.ev_data for e in b.events("ev_extra1 = 't1'"))
        )
        assert got == ["1", "3"]  # one batch over 4 ticks, filtered in the database


def test_unknown_queue_is_a_clear_error(qdb: str, queue: psycopg.Connection) -> None:
    with Consumer(qdb, "nope", "c") as consumer, pytest.raises(QueueError, match="Unknown queue"):
        consumer.register()
    with Consumer(qdb, "q", "c") as consumer, pytest.raises(QueueError, match="not registered"):
        consumer.next_batch()


def test_info_inside_a_batch_keeps_it_open(qdb: str, queue: psycopg.Connection) -> None:
    with Consumer(qdb, "q", "c") as consumer:
        consumer.register()
        _insert(queue, "a")
        tick(queue, "q")

        def look(batch: BatchReader) -> None:
            assert consumer.info()["current_batch"] == batch.batch_id
            assert [e.ev_data for e in batch.events()] == ["a"]

        assert consumer.process_batch(look) is not None
        assert consumer.info()["current_batch"] is None
