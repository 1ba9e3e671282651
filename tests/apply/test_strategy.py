"""The table of how a batch is replayed (:func:`pgferry.apply.replay.strategy.choose`), without a
database: small batches in two round trips, Spark for large ones when it is up, reader
threads above ``replay_read_ahead_events``, the second connection above
``replay_second_events``, the next batch read meanwhile; and Spark asked only when its
answer matters (asking remembers that a large batch wanted it).  Then what a segment of
so many parts is read by, and what the strategy plans its tables in (ev_id ranges, and
whether tables with updates are split)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pgferry.apply.replay.strategy import BatchFacts, Reads, Strategy, choose, may_be_small
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.node.model import NodeInfo
from pgferry.registry.routes import Route

pytestmark = pytest.mark.pure

SETTINGS = ReplaySettings(
    local_max_events=50_000,
    read_parts=0,
    read_ahead=2,
    read_ahead_events=2_000,
    read_range_events=100_000,
    merge_ranges=False,
    second_events=0,
)
# The node's own stream, a batch of 100 events with nothing but rows, small enough.
PLAIN = BatchFacts(
    main=True,
    estimate=100,
    scripts=False,
    removals=False,
    applies=True,
    small=True,
    second_left=False,
    read_next=True,
)


def _chosen(how: Strategy) -> str:
    """The strategy as the names of what it does: "small inline", "spark next", ..."""
    flags = {"small": how.small, "apart": how.apart, "next": how.start_next}
    names = [name for name, on in flags.items() if on]
    return " ".join([*names[:1], how.reads, *names[1:]] if how.small else [how.reads, *names])


BIG, MID = {"estimate": 60_000, "small": False}, {"estimate": 10_000, "small": False}
# (case, the batch's facts, Spark up, replay_second_events, what is chosen)
TABLE = [
    ("small", {}, True, 0, "small inline"),
    ("small above read_ahead_events", {"estimate": 2_001}, True, 0, "small threads next"),
    ("mid-sized", MID, True, 0, "threads next"),
    ("large, Spark up", BIG, True, 0, "spark next"),
    ("large, Spark down", BIG, False, 0, "threads next"),
    ("size unknown: large", {**BIG, "estimate": None}, True, 0, "spark next"),
    ("large with a script", {**BIG, "scripts": True}, True, 0, "threads"),
    ("large, nothing applies", {**BIG, "applies": False}, True, 0, "threads next"),
    ("small with a script", {"scripts": True}, True, 0, "inline"),
    ("small with a removal", {"removals": True}, True, 0, "inline"),
    ("small, second may have applied", {"second_left": True}, True, 0, "inline"),
    ("above second_events", MID, False, 5_000, "threads apart next"),
    ("at second_events", {**MID, "estimate": 5_000}, False, 5_000, "threads next"),
    ("second, not beside Spark", BIG, True, 5_000, "spark next"),
    ("second, not in a catch-up", {**MID, "main": False}, False, 5_000, "threads"),
    ("next batch not asked for", {**MID, "read_next": False}, False, 0, "threads"),
    ("a removal", {**MID, "removals": True}, False, 0, "threads"),
]


@pytest.mark.parametrize(
    ("facts", "spark_up", "second", "expected"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_the_table(facts: dict, spark_up: bool, second: int, expected: str) -> None:
    settings = replace(SETTINGS, second_events=second)
    assert _chosen(choose(replace(PLAIN, **facts), settings, lambda: spark_up)) == expected


@pytest.mark.parametrize(
    ("facts", "asked"),
    [
        ({"estimate": 60_000}, True),
        ({"estimate": None}, True),
        ({"estimate": 50_000}, False),  # not above local_max_events
        ({"estimate": 60_000, "scripts": True}, False),
        ({"estimate": 60_000, "applies": False}, False),
    ],
)
def test_spark_is_asked_only_for_a_large_batch_it_could_take(facts: dict, asked: bool) -> None:
    calls: list[int] = []

    def ready() -> bool:
        calls.append(1)
        return False

    choose(replace(PLAIN, small=False, **facts), SETTINGS, ready)
    assert calls == ([1] if asked else [])


def _node(node_type: str) -> NodeInfo:
    return NodeInfo(
        queue_name="q", node_type=node_type, node_name="n", worker_name="w",
        combined_queue=None, provider_node="p", provider_location=None, location=None,
        consumer_name="c", last_tick_id=None, paused=False,
    )  # fmt: skip


def _routes(copy_snapshot: str | None = None) -> dict[str, Route]:
    route = Route(
        table_name="public.t", dest_schema="public", dest_name="t", pk=("id",),
        columns=("id", "v"), types=("integer", "text"), merge_state="ok",
        copy_condition=None, copy_snapshot=copy_snapshot, skip_truncate=False,
        dest_fq="public.t",
    )  # fmt: skip
    return {route.table_name: route}


# Asked before the summary is read (whether the summary comes with the tables' reads):
# (case, the node's own stream, estimate, node type, a copy filter, small)
BEFORE_SUMMARY = [
    ("the node's own stream, small", True, 100, "leaf", None, True),
    ("at read_ahead_events", True, 2_000, "leaf", None, True),
    ("above read_ahead_events", True, 2_001, "leaf", None, False),
    ("size unknown", True, None, "leaf", None, False),
    ("a copied group's catch-up", False, 100, "leaf", None, False),
    ("a branch forwards its events", True, 100, "branch", None, False),
    ("a table still filtered by its copy", True, 100, "leaf", "10:20:", False),
]


@pytest.mark.parametrize(
    ("main", "estimate", "node_type", "copy_snapshot", "small"),
    [row[1:] for row in BEFORE_SUMMARY],
    ids=[row[0] for row in BEFORE_SUMMARY],
)
def test_may_be_small_before_the_summary(
    main: bool, estimate: int | None, node_type: str, copy_snapshot: str | None, small: bool
) -> None:
    routes = _routes(copy_snapshot)
    got = may_be_small(main, estimate, SETTINGS.read_ahead_events, _node(node_type), routes)
    assert got is small


# (case, the batch's reads, the segment's parts, what reads them)
SEGMENT_READS = [
    ("inline stays inline", "inline", 5, "inline"),
    ("one part: no thread", "threads", 1, "inline"),
    ("several parts: threads", "threads", 2, "threads"),
    ("nothing to read", "threads", 0, "inline"),
    ("Spark reads even one part", "spark", 1, "spark"),
    ("Spark, nothing to read", "spark", 0, "inline"),
]


@pytest.mark.parametrize(
    ("reads", "parts", "expected"),
    [row[1:] for row in SEGMENT_READS],
    ids=[row[0] for row in SEGMENT_READS],
)
def test_what_reads_a_segment(reads: Reads, parts: int, expected: str) -> None:
    how = Strategy(small=False, reads=reads, apart=False, start_next=False)
    assert how.segment_reads(parts) == expected


@pytest.mark.parametrize(
    ("reads", "apart", "ranges", "whole_updates"),
    [
        ("inline", False, False, True),  # every table read whole
        ("threads", False, True, True),  # reader threads: inserts-only tables split
        ("spark", False, True, False),  # Spark: ranges bound a task's memory
        ("threads", True, True, False),  # two connections
    ],
    ids=["inline", "threads", "spark", "threads-apart"],
)
def test_what_the_strategy_plans_its_tables_in(
    reads: Reads, apart: bool, ranges: bool, whole_updates: bool
) -> None:
    how = Strategy(small=False, reads=reads, apart=apart, start_next=False)
    assert (how.ranges, how.whole_updates) == (ranges, whole_updates)
