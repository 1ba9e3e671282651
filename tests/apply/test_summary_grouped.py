"""The grouped batch summary, folded on the worker, says what the per-table one says; a
segment's summary is read with its own reading of the answer; the rare events (queued
scripts and removals) are read together, in ev_id order."""

from __future__ import annotations

import itertools
from dataclasses import replace

from pgferry.apply.replay.batch_sql import (
    Segment,
    SummaryRow,
    fold_summary,
    grouped_summary_query,
    segment_summary,
    summary_query,
    summary_rows,
)
from pgferry.db import connect
from pgferry.events import EXECUTE_EVENT, REMOVAL_EVENTS
from pgferry.queue.batches import rare_events
from pgferry.registry.routes import Route


def _route(name: str, state: str = "ok") -> Route:
    schema, table = name.split(".")
    return Route(
        table_name=name, dest_schema=schema, dest_name=table, pk=("id",), columns=("id", "v"),
        types=("integer", "text"), merge_state=state, copy_condition=None, copy_snapshot=None,
        skip_truncate=False, dest_fq=name,
    )  # fmt: skip


ROUTES = [_route("s.mixed"), _route("s.ins"), _route("s.trunc"), _route("s.new", state=None)]
SEQS = ["s.seq_a", "s.seq_b"]

# (ev_type, ev_data, ev_extra1) in ev_id order from 1
EVENTS = [
    ("I:id", '{"id":1}', "s.mixed"),
    ("I:id", '{"id":1}', "s.ins"),
    ("SEQ", "5", "s.seq_a"),
    ("U:id", '{"id":1}', "s.mixed"),
    ("R", None, "s.trunc"),
    ("EXECUTE", "create table x()", "script.sql"),
    ("I:id", '{"id":2}', "s.ins"),
    ("SEQ", "9", "s.seq_a"),
    ("SEQ", "not a number", "s.other_seq"),  # not replicated here: never cast
    ("D:id", '{"id":1}', "s.mixed"),
    ("I:id", '{"id":3}', "s.trunc"),
    ("R", None, "s.trunc"),
    ("U:id", '{"id":3}', "s.trunc"),
    (REMOVAL_EVENTS[0], "s.gone", "s.gone"),
    ("I:id", '{"id":4}', "s.new"),  # not copied yet: no row
    ("I:id", '{"id":5}', "s.elsewhere"),  # not a table of this node
    ("SEQ", "3", "s.seq_b"),
    ("custom", "x", "s.mixed"),  # neither a row event nor a truncate
    ("U:id", '{"id":2}', "s.ins"),
]


def _by_name(row: SummaryRow) -> tuple[bool, str]:
    return row.name is None, row.name or ""


def test_grouped_summary_matches_per_table_summary(db_a: str, pg_a) -> None:
    with connect(pg_a.connstr(db_a), autocommit=True) as conn:
        conn.execute(
            "create table public.ev (ev_id bigint, ev_txid xid8 default pg_current_xact_id(),"
            " ev_type text, ev_data text, ev_extra1 text)"
        )
        for ev_id, (ev_type, data, extra1) in enumerate(EVENTS, start=1):
            conn.execute(
                "insert into public.ev (ev_id, ev_type, ev_data, ev_extra1)"
                " values (%s, %s, %s, %s)",
                (ev_id, ev_type, data, extra1),
            )
        batch = "select * from public.ev"
        segments = [Segment(), Segment(None, 8), Segment(4, 13), Segment(13, None)]
        seen_kinds = set()
        for segment, scripts, removals in itertools.product(segments, (False, True), (False, True)):
            old = summary_rows(
                conn.execute(
                    summary_query(batch, ROUTES, SEQS, segment, scripts=scripts, removals=removals)
                ).fetchall()
            )
            groups = conn.execute(grouped_summary_query(batch, SEQS, segment)).fetchall()
            new = fold_summary(groups, ROUTES, SEQS, scripts=scripts, removals=removals)
            case = (segment, scripts, removals)
            assert sorted(new, key=_by_name) == sorted(old, key=_by_name), case
            seen_kinds |= {row.name for row in old}
        # The cases compared include tables, sequences and the row of scripts / removals.
        assert {"s.mixed", "s.ins", "s.trunc", "s.seq_a", "s.seq_b", None} <= seen_kinds
        assert "s.new" not in seen_kinds and "s.elsewhere" not in seen_kinds


def test_large_batch_summary_in_parallel_says_the_same(db_a: str, pg_a) -> None:
    """A backlog's first summary may use parallel workers: same rows, and the plan does."""
    from pgferry.apply.replay.summary import PARALLEL_SUMMARY_EVENTS, summarize, summary_settings

    with connect(pg_a.connstr(db_a), autocommit=True) as conn:
        conn.execute(
            "create table public.ev (ev_id bigint, ev_txid xid8 default pg_current_xact_id(),"
            " ev_type text, ev_data text, ev_extra1 text)"
        )
        conn.execute(
            "insert into public.ev (ev_id, ev_type, ev_data, ev_extra1)"
            " select g, t.ev_type, t.ev_data, t.ev_extra1"
            "   from generate_series(1, 20000) g, lateral (select * from (values"
            "     ('I:id', '{\"id\":' || g || '}', 's.ins'), ('U:id', '{\"id\":1}', 's.mixed'),"
            "     ('SEQ', g::text, 's.seq_a'), ('R', null, 's.trunc')) v(ev_type, ev_data,"
            "     ev_extra1) offset g % 4 limit 1) t"
        )
        batch = "select * from public.ev"
        routes = {r.table_name: r for r in ROUTES}
        alone = summarize(
            conn, batch, routes, SEQS, Segment(), alone_events=PARALLEL_SUMMARY_EVENTS
        )
        plain = summarize(conn, batch, routes, SEQS, Segment())
        assert sorted(alone, key=_by_name) == sorted(plain, key=_by_name)
        assert {row.name for row in plain} == {"s.ins", "s.mixed", "s.seq_a", "s.trunc"}
        with conn.transaction():
            for setting in summary_settings(PARALLEL_SUMMARY_EVENTS):
                conn.execute(setting)
            plan = conn.execute("explain " + grouped_summary_query(batch, SEQS, Segment()))
            text = "\n".join(row[0] for row in plan)
        assert "Gather" in text and "Parallel" in text, text


RARE = (EXECUTE_EVENT, *REMOVAL_EVENTS)


def _event_table(conn) -> str:
    conn.execute(
        "create table public.ev (ev_id bigint, ev_txid xid8 default pg_current_xact_id(),"
        " ev_type text, ev_data text, ev_extra1 text, ev_extra2 text, ev_extra4 text)"
    )
    return "select * from public.ev"


def test_segment_summary_reads_as_the_per_table_query(db_a: str, pg_a) -> None:
    with connect(pg_a.connstr(db_a), autocommit=True) as conn:
        batch = _event_table(conn)
        for ev_id, (ev_type, data, extra1) in enumerate(EVENTS, start=1):
            conn.execute(
                "insert into public.ev (ev_id, ev_type, ev_data, ev_extra1)"
                " values (%s, %s, %s, %s)",
                (ev_id, ev_type, data, extra1),
            )
        # A copy hand-over that skips nothing (an empty snapshot sees no transaction):
        # the per-table query, the same rows.
        handover = [replace(ROUTES[0], copy_snapshot="1:1:"), *ROUTES[1:]]
        for routes, grouped in ((ROUTES, True), (handover, False)):
            for segment in (Segment(), Segment(4, 13)):
                query = segment_summary(batch, routes, SEQS, segment, scripts=True, removals=True)
                assert query is not None and query.grouped is grouped
                got = query.rows(conn.execute(query.text).fetchall())
                want = summary_rows(
                    conn.execute(
                        summary_query(batch, ROUTES, SEQS, segment, scripts=True, removals=True)
                    ).fetchall()
                )
                assert sorted(got, key=_by_name) == sorted(want, key=_by_name), segment
        # Nothing asked for: no query at all.
        assert segment_summary(batch, [], [], Segment()) is None


def test_rare_events_both_kinds_in_one_read_in_ev_id_order(db_a: str, pg_a) -> None:
    with connect(pg_a.connstr(db_a), autocommit=True) as conn:
        batch = _event_table(conn)
        rows = [
            (1, "I:id", '{"id":1}', "s.t", None, None),
            (2, REMOVAL_EVENTS[0], None, "s.gone", "root", None),
            (3, EXECUTE_EVENT, "create table x()", "a.sql", '{"k":1}', '["s.t"]'),
            (4, "U:id", '{"id":1}', "s.t", None, None),
            (5, REMOVAL_EVENTS[1], None, "s.seq", "root", None),
            (6, EXECUTE_EVENT, "drop table x", "b.sql", None, None),
        ]
        # Inserted out of order: the read orders by ev_id.
        for row in reversed(rows):
            conn.execute(
                "insert into public.ev (ev_id, ev_type, ev_data, ev_extra1, ev_extra2,"
                " ev_extra4) values (%s, %s, %s, %s, %s, %s)",
                row,
            )
        got = rare_events(conn, batch, RARE)
        assert [(e.ev_id, e.ev_type) for e in got] == [
            (2, REMOVAL_EVENTS[0]),
            (3, EXECUTE_EVENT),
            (5, REMOVAL_EVENTS[1]),
            (6, EXECUTE_EVENT),
        ]
        script = got[1]
        assert (script.ev_data, script.ev_extra1, script.ev_extra2, script.ev_extra4) == (
            "create table x()",
            "a.sql",
            '{"k":1}',
            '["s.t"]',
        )
        assert (got[0].ev_extra1, got[0].ev_extra2) == ("s.gone", "root")
        assert rare_events(conn, batch, (EXECUTE_EVENT,)) == [got[1], got[3]]
