"""Rows that cross a module boundary are built by name, so a column added to a SELECT, or
two columns swapped, cannot shift a field (docs/architecture.md, "One access layer per
schema"): the dataclasses refuse positional construction, and the readers take each column
by its name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgferry.apply.handover import CopyGroup
from pgferry.apply.replay.batch_sql import Segment, SummaryRow, summary_query, summary_rows
from pgferry.queue import batches
from pgferry.registry.routes import Route

pytestmark = pytest.mark.pure


@pytest.mark.parametrize("cls", [Route, CopyGroup, batches.Batch])
def test_positional_construction_is_refused(cls: type) -> None:
    with pytest.raises(TypeError):
        cls("a", "b", "c")


def _route(name: str) -> Route:
    schema, table = name.split(".")
    return Route(
        table_name=name, dest_schema=schema, dest_name=table, pk=("id",), columns=("id",),
        types=("integer",), merge_state="ok", copy_condition=None, copy_snapshot=None,
        skip_truncate=False, dest_fq=name,
    )  # fmt: skip


def test_the_summary_names_each_column_as_its_field() -> None:
    query = summary_query("select * from e", [_route("s.t")], ["s.q"], Segment(), scripts=True)
    fields = SummaryRow.__dataclass_fields__
    for name in fields:
        assert f'as "{name}"' in query, name
    row = ("s.t", 3, True, None, None, 7, 9, 0, 0, True, False)
    assert summary_rows([row]) == [
        SummaryRow(
            "s.t",
            row_events=3,
            inserts_only=True,
            first=7,
            last=9,
            some_inserts=True,
        )  # fmt: skip
    ]


def test_a_batch_takes_get_batch_info_columns_by_name() -> None:
    made = datetime(2026, 1, 1, tzinfo=UTC)
    info = {  # another order than the function's, and a column more
        "lag": timedelta(seconds=2),
        "extra": "ignored",
        "tick_id": 12,
        "prev_tick_id": 10,
        "batch_end": made,
        "batch_start": made - timedelta(seconds=1),
        "seq_start": 100,
        "seq_end": 150,
        "snapshot": "5:9:",
        "prev_snapshot": "4:5:",
        "queue_name": "q",
        "consumer_name": "c",
    }
    batch = batches._batch(7, info, "select 1")
    assert (batch.batch_id, batch.prev_tick_id, batch.tick_id) == (7, 10, 12)
    assert (batch.tick_time, batch.prev_tick_time) == (made, made - timedelta(seconds=1))
    assert (batch.prev_event_seq, batch.event_seq) == (100, 150)
    assert (batch.tick_snapshot, batch.prev_snapshot) == ("5:9:", "4:5:")
    assert (batch.queue_name, batch.consumer_name, batch.event_sql) == ("q", "c", "select 1")
