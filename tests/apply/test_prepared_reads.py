"""A batch's reads with its tick range as parameters: prepared once, planned once.

The generic event query (``generic_event_sql``, the range as ``$1 .. $6``) reads exactly
the events the literal one (``batch_event_sql``) reads, batch after batch, with
transactions running across the ticks (read at the batch where they commit, never twice,
never missed) and one rolled back.  The reads composed on it are the same text for two
batches, so the session prepares each once and runs it with a generic plan; a worker's
small batches show it on the worker's own provider session, with the batch's description
(a constant text per consumer).  A batch read in parts
(larger than ``replay_read_ahead_events``) keeps the literal text.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from pgferry import schema
from pgferry.apply.replay.batch_sql import Segment, grouped_summary_query
from pgferry.apply.replay.one_connection import ApplyStats
from pgferry.apply.replay.read import GENERIC_PLAN, read_only_results
from pgferry.db import connect
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import EVENT_RANGE_TYPES, Batch, BatchRule

PREPARED_SQL = (
    "select name, generic_plans, custom_plans from pg_prepared_statements"
    " where starts_with(name, 'pgferry_') order by name"
)


def _tick(conn: psycopg.Connection) -> None:
    conn.execute("select ferry_queue.force_tick('q')")
    conn.execute("select ferry_queue.ticker('q')")


def _event(conn: psycopg.Connection, data: str) -> None:
    conn.execute("select ferry_queue.insert_event('q', 't', %s)", (data,))


def _take(conn: psycopg.Connection) -> Batch:
    batch, _ = queue_batches.take_batch(conn, "q", "c", BatchRule())
    assert batch is not None and batch.event_sql is not None and batch.events is not None
    return batch


def test_the_generic_query_reads_what_the_literal_one_reads(db_a: str) -> None:
    with psycopg.connect(db_a) as conn:
        schema.install(conn, ("queue",))
    with (
        psycopg.connect(db_a, autocommit=True) as admin,
        psycopg.connect(db_a) as long_a,
        psycopg.connect(db_a) as long_c,
        psycopg.connect(db_a) as aborted,
        connect(db_a, autocommit=True) as reader,
    ):
        admin.execute("select ferry_queue.create_queue('q')")
        admin.execute("select ferry_queue.register_consumer('q', 'c')")
        _event(long_a, "a")  # running at tick 1, committed before tick 2
        _event(aborted, "x")  # never read
        _event(admin, "b")
        _tick(admin)  # tick 1
        _event(long_c, "c")  # running at tick 2, committed before tick 3
        _event(admin, "d")
        long_a.commit()
        _tick(admin)  # tick 2
        aborted.rollback()
        long_c.commit()
        _event(admin, "e")
        _tick(admin)  # tick 3

        generic = queue_batches.generic_event_sql(reader)
        read: list[list[str]] = []
        ranges = []
        for _ in range(3):
            batch = _take(admin)
            literal = admin.execute(batch.event_sql.encode()).fetchall()  # type: ignore[union-attr]
            (rows,) = read_only_results(reader, [generic], events=batch.events)
            assert sorted(rows) == sorted(literal)
            read.append(sorted(r[5] for r in rows))
            ranges.append(batch.events)
            queue_batches.finish_batch(admin, batch.batch_id)
        assert queue_batches.generic_event_sql(admin) == generic  # one text for every batch
        assert len(set(ranges)) == 3
        assert read == [["b"], ["a", "d"], ["c", "e"]]
        # Tick 1's running transaction is read through the range's list of them.
        assert ranges[1] is not None and ranges[1].running != "{}"
        # One statement, prepared once and run for each batch with its generic plan.
        assert [row[1:] for row in reader.execute(PREPARED_SQL).fetchall()] == [(3, 0)]


def test_a_summary_is_the_same_text_for_two_batches(db_a: str) -> None:
    with psycopg.connect(db_a) as conn:
        schema.install(conn, ("queue",))
    with (
        psycopg.connect(db_a, autocommit=True) as admin,
        connect(db_a, autocommit=True) as reader,
    ):
        admin.execute("select ferry_queue.create_queue('q')")
        admin.execute("select ferry_queue.register_consumer('q', 'c')")
        texts, literal_texts, results = [], [], []
        for n in range(2):
            _event(admin, f"e{n}")
            _tick(admin)
            batch = _take(admin)
            generic = queue_batches.generic_event_sql(reader)
            texts.append(grouped_summary_query(generic, ["public.s"], Segment()))
            literal_texts.append(grouped_summary_query(batch.event_sql or "", [], Segment()))
            results.append(read_only_results(reader, [texts[-1]], events=batch.events)[0])
            queue_batches.finish_batch(admin, batch.batch_id)
        assert texts[0] == texts[1]
        assert literal_texts[0] != literal_texts[1]  # the range inlined: planned every time
        assert [r[0][:3] for r in results] == [(None, "t", 1), (None, "t", 1)]
        assert [r[1:] for r in reader.execute(PREPARED_SQL).fetchall()] == [(2, 0)]
        assert reader.info.transaction_status == TransactionStatus.IDLE


def _observe(worker) -> list[ApplyStats]:
    seen: list[ApplyStats] = []
    worker.batch_observers.append(lambda batch, stats, seconds: seen.append(stats))
    return seen


def _setup(pair) -> None:
    for side in (pair.root, pair.leaf):
        side('create table public."Tä ble" (id int primary key, v text, n numeric(8, 2))')
        side("create table public.other (id bigint primary key, at timestamptz)")
    pair.add_tables('public."Tä ble"', "public.other")


def _prepared(worker) -> list[tuple]:
    provider = worker.conns.provider
    assert provider is not None
    return provider.execute(PREPARED_SQL).fetchall()


def test_a_workers_small_batches_run_statements_prepared_once(pair) -> None:
    _setup(pair)
    worker = pair.catch_up()
    seen = _observe(worker)
    counts = []
    for n in range(6):
        pair.root('insert into public."Tä ble" values (%s, %s, %s)', (n, f"v {n}", n * 1.5))
        pair.root("insert into public.other values (%s, now())", (n,))
        pair.root("update public.\"Tä ble\" set v = v || '!' where id = %s", (n // 2,))
        pair.catch_up(worker)
        counts.append(len(_prepared(worker)))
    pair.same('public."Tä ble"')
    pair.same("public.other")
    assert seen and all(s.small for s in seen if s.upserts)
    # The summary and each table's read: prepared by the first batches, then only run.
    assert counts[2] >= 3 and counts[2:] == [counts[2]] * 4
    plans = _prepared(worker)
    assert all(custom == 0 for _, _, custom in plans)
    assert max(generic for _, generic, _ in plans) >= 6
    # The batch's description too: one text per consumer, planned once.
    described = [generic for name, generic, _ in plans if name.startswith("pgferry_batch_")]
    assert len(described) == 1 and described[0] >= 6


def test_a_batch_read_in_parts_keeps_the_literal_text(pair) -> None:
    _setup(pair)
    worker = pair.catch_up(pair.worker(replay_read_ahead_events="0"))
    pair.root('insert into public."Tä ble" select g, g::text, g from generate_series(1, 50) g')
    pair.root("insert into public.other select g, now() from generate_series(1, 50) g")
    pair.catch_up(worker)
    pair.same('public."Tä ble"')
    pair.same("public.other")
    # The tables' reads (COPY) were never prepared; only an idle batch's summary may be.
    provider = worker.conns.provider
    assert provider is not None
    statements = provider.execute(
        "select statement from pg_prepared_statements where starts_with(name, 'pgferry_')"
    ).fetchall()
    assert not any("json_to_record" in text for (text,) in statements)


def test_the_generic_plan_probes_the_txid_index(db_a: str) -> None:
    """A generic plan is kept while the event partition grows: it must never scan the
    partition whole (it would read every event of it at every batch)."""
    with psycopg.connect(db_a) as conn:
        schema.install(conn, ("queue",))
    with connect(db_a, autocommit=True) as conn:
        conn.execute("select ferry_queue.create_queue('q')")
        conn.execute("select ferry_queue.register_consumer('q', 'c')")
        conn.execute(
            "select ferry_queue.insert_event('q', 't', g::text) from generate_series(1, 20000) g"
        )
        _tick(conn)
        _event(conn, "one")
        _tick(conn)
        queue_batches.finish_batch(conn, _take(conn).batch_id)
        batch = _take(conn)
        generic = queue_batches.generic_event_sql(conn)
        (rows,) = read_only_results(conn, [generic], events=batch.events)
        assert [r[5] for r in rows] == ["one"]
        values = ", ".join(sql.Literal(v).as_string(conn) for v in batch.events.args())  # type: ignore[union-attr]
        conn.execute(f"prepare plan_of ({', '.join(EVENT_RANGE_TYPES)}) as {generic}")  # type: ignore[arg-type]
        with conn.transaction():
            for setting in GENERIC_PLAN:
                conn.execute(setting)  # type: ignore[arg-type]
            plan = "\n".join(
                r[0]
                for r in conn.execute(f"explain execute plan_of ({values})").fetchall()  # type: ignore[arg-type]
            )
        assert "event_txid" in plan or "ev_txid" in plan, plan
        assert "Seq Scan" not in plan, plan
