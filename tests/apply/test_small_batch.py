"""A small batch's subscriber transaction in two round trips (pgferry.apply.replay.small_batch).

Every kind of change of a few tables, names that need quoting, the rows a subscriber
drifted from (counted as the table-by-table apply counts them), a batch that fails there
(applied again table by table, whose error names the table, nothing half-applied) and a
batch too large for it.
"""

from __future__ import annotations

import logging

import pytest

from pgferry.apply.replay import small_batch
from pgferry.apply.replay.one_connection import ApplyStats
from pgferry.errors import PgferryError

TABLES = {
    "public.log": "create table public.log (id bigserial primary key, v text)",
    "public.cur": "create table public.cur (id int primary key, n bigint, at timestamptz)",
    '"Mixed Schema"."Tä ble"': 'create table "Mixed Schema"."Tä ble"'
    ' (id int primary key, "Value Ä" text, tags text[], doc jsonb, amount numeric(12, 2))',
}


def _observe(worker) -> list[ApplyStats]:
    seen: list[ApplyStats] = []
    worker.batch_observers.append(lambda batch, stats, seconds: seen.append(stats))
    return seen


def _same_all(pair) -> None:
    for table in TABLES:
        pair.same(table)


def _setup(pair):
    for side in (pair.root, pair.leaf):
        side('create schema "Mixed Schema"')
        for ddl in TABLES.values():
            side(ddl)
    pair.root("insert into public.cur select g, g, now() from generate_series(1, 20) g")
    pair.root(
        """insert into "Mixed Schema"."Tä ble" select g, 'v' || g, array['a', 'b"c'],
           '{"k": [1, 2]}', g * 1.25 from generate_series(1, 20) g"""
    )
    pair.add_tables(*TABLES)
    return pair.catch_up()


def test_every_kind_of_change_in_one_small_batch(pair) -> None:
    worker = _setup(pair)
    seen = _observe(worker)
    pair.root(
        """begin;
        insert into public.log (v) select 'line ' || g from generate_series(1, 30) g;
        insert into public.log (v) values (null), (''), (E'tab\\there, "quotes", (parens)');
        update public.cur set n = n * 10, at = at + interval '1 day' where id <= 10;
        insert into "Mixed Schema"."Tä ble" values (21, null, null, null, null);
        update "Mixed Schema"."Tä ble" set "Value Ä" = 'changed', doc = '{"x": null}'
         where id in (2, 21);
        delete from "Mixed Schema"."Tä ble" where id in (3, 4);
        update "Mixed Schema"."Tä ble" set id = 100 where id = 5;
        commit"""
    )
    pair.catch_up(worker)
    _same_all(pair)
    assert seen and all(s.small for s in seen)
    applied = sum(s.upserts for s in seen), sum(s.deletes for s in seen)
    assert applied == (33 + 10 + 3, 3)  # the key change: a delete and an insert
    assert not any(s.recreated or s.missing_deletes for s in seen)


def test_drift_is_counted_as_table_by_table(pair) -> None:
    worker = _setup(pair)
    seen = _observe(worker)
    # Behind replication's back:
    pair.leaf("set session_replication_role = replica; delete from public.cur where id in (1, 2)")
    pair.root("update public.cur set n = -1 where id between 1 and 5")  # updates only
    pair.catch_up(worker)
    pair.leaf(
        'set session_replication_role = replica; delete from "Mixed Schema"."Tä ble" where id = 7'
    )
    pair.root('delete from "Mixed Schema"."Tä ble" where id in (7, 8)')
    pair.catch_up(worker)
    _same_all(pair)
    assert seen and all(s.small for s in seen)
    assert sum(s.recreated for s in seen) == 2
    assert sum(s.missing_deletes for s in seen) == 1
    assert pair.leaf("select diverged_rows, diverged_deletes from ferry_node.local_state") == [
        (2, 1)
    ]


def test_failing_small_batch_names_the_table_and_applies_nothing(pair) -> None:
    worker = _setup(pair)
    pair.leaf("alter table public.cur add constraint n_positive check (n >= 0)")
    pair.root("begin; insert into public.log (v) values ('x'); update public.cur set n = -5"
              " where id = 1; commit")  # fmt: skip
    pair.tick()
    with pytest.raises(PgferryError, match=r"applying to public\.cur: .*n_positive"):
        worker.work()
    assert pair.leaf("select count(*) from public.log") == [(0,)]
    pair.leaf("alter table public.cur drop constraint n_positive")
    seen = _observe(worker)
    pair.catch_up(worker)
    _same_all(pair)
    assert seen and all(s.small for s in seen)


def test_batch_larger_than_the_inline_reads_goes_table_by_table(make_pair) -> None:
    pair = make_pair(replay_read_ahead_events="10")
    worker = _setup(pair)
    seen = _observe(worker)
    pair.root("insert into public.log (v) select 'x' from generate_series(1, 50) g")
    pair.catch_up(worker)
    _same_all(pair)
    assert seen and not any(s.small for s in seen)


@pytest.mark.parametrize("guessed", [8, 0], ids=["with-the-summary", "after-the-summary"])
def test_tables_read_with_the_summary_or_after_it(pair, caplog, monkeypatch, guessed) -> None:
    """With few tables, those of the last batch (at a worker's start: every table) are
    read in the summary's message, whether the batch holds them or not, the others after
    the summary; with more tables, every table the summary names is read after it."""
    monkeypatch.setattr(small_batch, "GUESSED_TABLES", guessed)
    worker = _setup(pair)
    worker.replay._recent = None  # as at a worker's start
    seen = _observe(worker)

    def read(change: str) -> list[tuple[str, str]]:
        caplog.clear()
        pair.root(change)
        with caplog.at_level(logging.DEBUG, logger="pgferry.apply.replay.small_batch"):
            pair.catch_up(worker)
        messages = [r.getMessage() for r in caplog.records]
        lines = [m for m in messages if m.startswith("  ") and " rows (" in m]
        return [
            (line.split(":")[0].strip(), "with" if "read with the summary" in line else "after")
            for line in lines
        ]

    guess = "with" if guessed else "after"
    assert read("update public.cur set n = 0 where id = 3") == [("public.cur", guess)]
    # Not in the last batch: read after the summary; in it: with the summary.
    assert read("insert into public.log (v) values ('a')") == [("public.log", "after")]
    assert read("insert into public.log (v) values ('b')") == [("public.log", guess)]
    _same_all(pair)
    assert seen and all(s.small for s in seen)


def test_rows_too_large_for_one_array_go_table_by_table(pair, monkeypatch) -> None:
    worker = _setup(pair)
    seen = _observe(worker)
    monkeypatch.setattr(small_batch, "ARRAY_BYTES", 200)  # a few rows' worth
    pair.root("update public.cur set n = n + 1 where id <= 2")  # small enough
    pair.catch_up(worker)
    pair.root("insert into public.log (v) select repeat('x', 100) from generate_series(1, 5)")
    pair.catch_up(worker)
    _same_all(pair)
    assert [s.small for s in seen if s.tables] == [True, False]
