"""What a batch's strategy is made into for one segment (pgferry.apply.replay.ways.Ways.make),
without a database: the reads inline on the worker's provider connection, or the reader
threads' pool kept between batches, and the worker's one connection when the second one
is not there.  Nothing is read: a way's reads start when its apply enters them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgferry.apply.replay.batch_sql import Segment
from pgferry.apply.replay.one_connection import OneConnection
from pgferry.apply.replay.part_reads import InlineReads, ReaderPool
from pgferry.apply.replay.plan import SegmentPlan, TableWork
from pgferry.apply.replay.prefetch import Prefetcher
from pgferry.apply.replay.shapes import TableShapes
from pgferry.apply.replay.spark_session import WorkerSpark
from pgferry.apply.replay.stage_tables import StageTables
from pgferry.apply.replay.strategy import Reads, Strategy
from pgferry.apply.replay.two_connections import SecondApply
from pgferry.apply.replay.ways import Reading, Ways
from pgferry.apply.worker_settings import ReplaySettings
from pgferry.config import Config
from pgferry.registry.routes import Route

pytestmark = pytest.mark.pure

SETTINGS = ReplaySettings(
    local_max_events=50_000,
    read_parts=0,
    read_ahead=2,
    read_ahead_events=2_000,
    read_range_events=100_000,
    merge_ranges=False,
    second_events=5_000,
)
# Never connected to: the pool connects on a reader's first read.
DSN = "host=127.0.0.1 port=1 dbname=none connect_timeout=1"


def _work(name: str) -> TableWork:
    route = Route(
        table_name=name, dest_schema="public", dest_name=name.split(".")[1], pk=("id",),
        columns=("id", "v"), types=("integer", "text"), merge_state="ok",
        copy_condition=None, copy_snapshot=None, skip_truncate=False, dest_fq=name,
    )  # fmt: skip
    return TableWork(route=route, columns=route.columns, rows=10, inserts_only=False, barrier=None)


def _plan(parts: int) -> SegmentPlan:
    return SegmentPlan(
        tables=[_work(f"public.t{n}") for n in range(parts)], truncate=[], sequences={}
    )


def _reading(reads: Reads, apart: bool = False) -> Reading:
    how = Strategy(small=False, reads=reads, apart=apart, start_next=False)
    return Reading(
        queue="q", batch_id=1, tick_id=2, tick_time=None, batch_sql="select 1", seqs=[],
        how=how, consumer="c",
    )  # fmt: skip


@pytest.fixture
def ways() -> Ways:
    spark = WorkerSpark(Config(Path("node.ini"), "pgferry", {}))
    made = Ways(spark, TableShapes(), StageTables(), SecondApply(), Prefetcher())
    made.provider_dsn = DSN
    yield made
    made.close_readers()


def _make(ways: Ways, reading: Reading, parts: int) -> OneConnection:
    plan = _plan(parts)
    provider = object()  # held by InlineReads, never used before the apply
    way = ways.make(reading, plan, Segment(), SETTINGS, None, provider, {})  # type: ignore[arg-type]
    assert isinstance(way, OneConnection)
    return way


@pytest.mark.parametrize(
    ("reads", "parts", "pool"),
    [("inline", 3, False), ("threads", 1, False), ("threads", 0, False), ("threads", 3, True)],
    ids=["inline", "threads-one-part", "threads-nothing", "threads-several-parts"],
)
def test_a_segment_is_read_inline_or_by_the_kept_pool(
    ways: Ways, reads: Reads, parts: int, pool: bool
) -> None:
    way = _make(ways, _reading(reads), parts)
    if pool:
        assert isinstance(way.reads, ReaderPool)
        assert way.reads is ways.readers
        again = _make(ways, _reading(reads), parts)
        assert again.reads is way.reads  # kept between segments and batches
    else:
        assert isinstance(way.reads, InlineReads)
        assert ways.readers is None  # no pool made for a segment read inline
    assert (way.queue, way.tick_id, way.stages) == ("q", 2, ways.stages)


def test_without_a_second_connection_the_apply_stays_on_one(ways: Ways) -> None:
    """A strategy that allows the second connection, on a worker that has none (no node
    connection string for it yet): every table on the worker's connection."""
    way = _make(ways, _reading("threads", apart=True), 3)
    assert way.reads is ways.readers
