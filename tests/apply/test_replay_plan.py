"""Planning a batch from its summary: ranges of large tables, order, truncates, sequences."""

from __future__ import annotations

import pytest

from pgferry.apply.replay.batch_sql import Segment, SummaryRow
from pgferry.apply.replay.plan import plan_segment
from pgferry.registry.routes import Route

pytestmark = pytest.mark.pure


def _route(name: str, state: str = "ok", skip_truncate: bool = False) -> Route:
    schema, table = name.split(".")
    return Route(
        table_name=name, dest_schema=schema, dest_name=table, pk=("id",), columns=("id", "v"),
        types=("integer", "text"), merge_state=state, copy_condition=None, copy_snapshot=None,
        skip_truncate=skip_truncate, dest_fq=name,
    )  # fmt: skip


ROUTES = {
    "s.big": _route("s.big"),
    "s.small": _route("s.small", skip_truncate=True),
    "s.new": _route("s.new", state=None),  # not copied yet: nothing applies
}
# name, row events, inserts only, barrier, seq value, first ev_id, last ev_id, scripts
SUMMARY = [
    SummaryRow("s.big", 100, True, None, None, 1001, 1200, 0),
    SummaryRow("s.small", 10, True, 1150, None, 1005, 1190, 0),
    SummaryRow("s.new", 5, True, None, None, 1002, 1003, 0),
    SummaryRow("s.seq", 0, False, None, 77, None, None, 0),
    SummaryRow(None, 0, False, None, None, None, None, 2),
]


def test_ranges_cover_the_table_once_and_apply_in_order() -> None:
    plan = plan_segment(SUMMARY, ROUTES, ["s.seq"], {}, range_events=30)
    big = [w for w in plan.tables if w.route.table_name == "s.big"]
    assert len(big) == 4
    spans = [(w.span.after, w.span.upto) for w in big if w.span]
    assert spans == sorted(spans)
    assert spans[0][0] == 1000 and spans[-1][1] == 1200
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert [w.order for w in big] == [0, 1, 2, 3]
    # Ranges of one table keep their order in the reading order too.
    positions = [plan.tables.index(w) for w in big]
    assert positions == sorted(positions)
    assert [w.route.table_name for w in plan.tables].count("s.small") == 1
    assert plan.sequences == {"s.seq": 77}
    assert plan.truncate == []  # s.small skips truncates


def test_no_ranges_without_read_ahead_and_for_tiny_spans() -> None:
    plan = plan_segment(SUMMARY, ROUTES, [], {})
    assert [(w.route.table_name, w.span) for w in plan.tables] == [
        ("s.big", None),
        ("s.small", None),
    ]
    one_id = [SummaryRow("s.big", 100, True, 1100, None, 1100, 1100, 0)]
    plan = plan_segment(one_id, ROUTES, [], {}, range_events=10)
    assert len(plan.tables) == 1 and plan.tables[0].span is None
    assert [r.table_name for r in plan.truncate] == ["s.big"]


def test_only_insert_only_tables_are_split() -> None:
    """A table with updates or deletes is read whole: each key collapses to one row."""
    mixed = [SummaryRow("s.big", 100, False, None, None, 1001, 1200, 0)]
    plan = plan_segment(mixed, ROUTES, [], {}, range_events=30)
    assert [(w.route.table_name, w.span) for w in plan.tables] == [("s.big", None)]
    inserts = [SummaryRow("s.big", 100, True, None, None, 1001, 1200, 0)]
    assert len(plan_segment(inserts, ROUTES, [], {}, range_events=30).tables) == 4
    # Read by Spark tasks (each part held whole by the driver): split all the same.
    split = plan_segment(mixed, ROUTES, [], {}, range_events=30, whole_updates=False)
    assert len(split.tables) == 4


def test_tables_with_updates_in_ranges_merged_here() -> None:
    """With ``merge_updates`` a table with updates is split too, its ranges marked to be
    merged on the subscriber, and read before the other tables' ranges."""
    summary = [
        SummaryRow("s.small", 100, True, None, None, 1001, 1200, 0),  # inserts only
        SummaryRow("s.big", 100, False, None, None, 1001, 1200, 0),
    ]
    plan = plan_segment(summary, ROUTES, [], {}, range_events=30, merge_updates=True)
    big = [w for w in plan.tables if w.table_name == "s.big"]
    assert [(w.order, w.ranges, w.merge) for w in big] == [(i, 4, True) for i in range(4)]
    assert plan.tables[:4] == big  # its ranges first, in order
    small = [w for w in plan.tables if w.table_name == "s.small"]
    assert len(small) == 4 and not any(w.merge for w in small)
    # Too few events to split: one part, nothing to merge.
    one = plan_segment(summary, ROUTES, [], {}, range_events=1000, merge_updates=True)
    assert [(w.table_name, w.merge, w.span) for w in one.tables] == [
        ("s.big", False, None),
        ("s.small", False, None),
    ]


def test_segment_filters() -> None:
    assert [f.as_string(None) for f in Segment(5, 9).filters()] == ["e.ev_id > 5", "e.ev_id <= 9"]
    assert Segment().filters() == []
