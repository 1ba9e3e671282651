"""The planner's rules, without a database: the ev_id ranges of a split table, the columns
and types a part is read with, which tables truncate, which are merged on the subscriber.

:func:`pgferry.apply.replay.plan.plan_segment` takes a segment's summary rows and the routes and
decides only; these tests give it rows as a summary query would return them.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgferry.apply.replay.batch_sql import SummaryRow
from pgferry.apply.replay.plan import apply_columns, plan_segment
from pgferry.apply.replay.summary import count_removals, count_scripts
from pgferry.registry.routes import Route

pytestmark = pytest.mark.pure


def _route(
    name: str,
    *,
    columns: tuple[str, ...] = ("id", "v"),
    types: tuple[str, ...] = ("integer", "text"),
    pk: tuple[str, ...] = ("id",),
    **more: object,
) -> Route:
    schema, table = name.split(".")
    fields: dict = {
        "table_name": name, "dest_schema": schema, "dest_name": table, "pk": pk,
        "columns": columns, "types": types, "merge_state": "ok", "copy_condition": None,
        "copy_snapshot": None, "skip_truncate": False, "dest_fq": name,
    }  # fmt: skip
    return Route(**{**fields, **more})


@settings(deadline=None)  # a loaded machine's pauses are no failure of the planner
@given(
    rows=st.integers(1, 5000),
    first=st.integers(1, 10_000),
    width=st.integers(0, 3000),
    range_events=st.integers(5, 800),
)
def test_ranges_cover_the_events_once_in_order(
    rows: int, first: int, width: int, range_events: int
) -> None:
    """A split table's ranges are contiguous, ordered, cover (first - 1, last] exactly and
    are no more than its ev_ids or than its events divided by ``range_events``."""
    last = first + width
    summary = [SummaryRow("s.t", rows, True, None, None, first, last)]
    parts = plan_segment(summary, {"s.t": _route("s.t")}, [], {}, range_events=range_events)
    works = parts.tables
    if rows <= range_events or last <= first:
        assert len(works) == 1 and works[0].span is None and works[0].rows == rows
        return
    spans = [(w.span.after, w.span.upto) for w in works if w.span]
    assert len(spans) == len(works) == min(-(-rows // range_events), width + 1)
    assert spans[0][0] == first - 1 and spans[-1][1] == last
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))
    assert [w.order for w in works] == list(range(len(works)))
    assert {w.ranges for w in works} == {len(works)}


def test_columns_both_sides_have() -> None:
    """A column only the subscriber has is left to its default, unless it is the key or
    the capture leaves it out; with no source shape every local column is read."""
    route = _route(
        "s.t",
        columns=("id", "v", "local_only", "skipped"),
        types=("integer", "text", "text", "text"),
        ignored=("skipped",),
    )
    assert apply_columns(route, None) == ("id", "v", "local_only")
    assert apply_columns(route, frozenset({"v", "skipped", "gone"})) == ("id", "v")


def test_binary_only_for_builtin_types_and_decode_as_text_what_the_provider_lacks() -> None:
    routes = {
        "s.plain": _route("s.plain", builtin_types=True),
        "s.own": _route("s.own", types=("integer", "public.mood"), builtin_types=False),
    }
    summary = [
        SummaryRow("s.plain", 3, True, None, None, 1, 3),
        SummaryRow("s.own", 3, True, None, None, 4, 6),
    ]
    plan = plan_segment(summary, routes, [], {}, binary=True, provider_types={"public.mood": False})
    by_name = {w.table_name: w for w in plan.tables}
    assert by_name["s.plain"].binary and not by_name["s.own"].binary
    assert by_name["s.own"].decode == ("integer", "text")
    assert by_name["s.plain"].decode == ("integer", "text")
    plan = plan_segment(summary, routes, [], {}, binary=False)
    assert not any(w.binary for w in plan.tables)
    assert {w.table_name: w.decode for w in plan.tables}["s.own"] == ("integer", "public.mood")


def test_truncates_sorted_and_a_truncate_alone_reads_nothing() -> None:
    routes = {
        "s.b": _route("s.b"),
        "s.a": _route("s.a"),
        "s.kept": _route("s.kept", skip_truncate=True),
    }
    summary = [
        SummaryRow("s.b", 0, False, 10, None, None, None),  # TRUNCATE only: nothing to read
        SummaryRow("s.a", 2, False, 12, None, 11, 13),
        SummaryRow("s.kept", 0, False, 14, None, None, None),
    ]
    plan = plan_segment(summary, routes, [], {})
    assert [r.table_name for r in plan.truncate] == ["s.a", "s.b"]
    assert [(w.table_name, w.barrier) for w in plan.tables] == [("s.a", 12)]


def test_keyless_table_with_updates_is_never_merged() -> None:
    """A table without a key cannot merge ranges by key: it is read whole."""
    routes = {"s.k": _route("s.k", pk=(), keyless=True), "s.p": _route("s.p")}
    summary = [
        SummaryRow("s.k", 100, False, None, None, 1, 200),
        SummaryRow("s.p", 100, False, None, None, 1, 200),
    ]
    plan = plan_segment(summary, routes, [], {}, range_events=30, merge_updates=True)
    keyless = [w for w in plan.tables if w.table_name == "s.k"]
    merged = [w for w in plan.tables if w.table_name == "s.p"]
    assert [(w.span, w.merge) for w in keyless] == [(None, False)]
    assert len(merged) == 4 and all(w.merge for w in merged)
    assert plan.tables[:4] == merged  # merged ranges are read first


def test_tables_not_yet_copied_and_unknown_names_are_left_out() -> None:
    routes = {"s.copying": _route("s.copying", merge_state="in-copy")}
    summary = [
        SummaryRow("s.copying", 5, True, None, None, 1, 5),
        SummaryRow("s.unknown", 5, True, None, None, 6, 9),
        SummaryRow("s.seq", 0, False, None, 42),
        SummaryRow(None, scripts=2, removals=1),
        SummaryRow(None, scripts=1),
    ]
    plan = plan_segment(summary, routes, ["s.seq"], {})
    assert plan.tables == [] and plan.truncate == []
    assert plan.sequences == {"s.seq": 42}
    assert count_scripts(summary) == 3 and count_removals(summary) == 1


def test_larger_tables_read_first() -> None:
    """Unsplit tables are read largest first: what is read first is applied first."""
    routes = {n: _route(n) for n in ("s.a", "s.b", "s.c")}
    summary = [
        SummaryRow("s.a", 5, True, None, None, 1, 5),
        SummaryRow("s.b", 50, False, None, None, 6, 60),
        SummaryRow("s.c", 20, True, None, None, 61, 90),
    ]
    plan = plan_segment(summary, routes, [], {})
    assert [w.table_name for w in plan.tables] == ["s.b", "s.c", "s.a"]
