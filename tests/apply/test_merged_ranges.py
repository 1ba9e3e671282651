"""A large table with updates read in ranges and merged on the subscriber.

With ``replay_merge_ranges`` a table with updates in a batch read by
reader threads is read in ev_id ranges too; each range collapses on the provider on its
own, and the subscriber keeps each key's row of the latest range before the table's
handler applies it once.  What it applies, and what it counts as found missing, must be
what a whole read gives.
"""

from __future__ import annotations

import logging

import psycopg
import pytest

from pgferry.apply.replay.one_connection import ApplyStats, apply_parts
from pgferry.apply.replay.plan import TableWork
from pgferry.apply.replay.read import ReplayError
from pgferry.apply.replay.stage_tables import StageTables
from pgferry.registry.routes import Route

TABLE = "create table public.t (id int primary key, v text, n int)"
# Batches read by reader threads, tables in ranges of about 40 row events.
READS = {"replay_read_ahead_events": "0", "replay_read_range_events": "40"}


def _observe(worker) -> list[ApplyStats]:
    seen: list[ApplyStats] = []
    worker.batch_observers.append(lambda batch, stats, seconds: seen.append(stats))
    return seen


@pytest.mark.parametrize("merge", ["on", "off"])
def test_ranges_merged_apply_what_a_whole_read_does(make_pair, caplog, merge: str) -> None:
    pair = make_pair(**READS, replay_merge_ranges=merge)
    pair.root(TABLE)
    pair.root("insert into t select g, 'v' || g, 0 from generate_series(1, 200) g")
    pair.leaf(TABLE)
    pair.add_tables("public.t")
    worker = pair.catch_up()
    seen = _observe(worker)
    # Behind replication's back: two rows gone here.
    pair.leaf("set session_replication_role = replica; delete from t where id in (5, 150)")
    # One transaction, so one batch: keys updated in several ranges, one deleted in a
    # later range than its updates.
    pair.root(
        """
        update t set n = n + 1;
        update t set v = 'second ' || id where id <= 60;
        delete from t where id in (7, 150);
        update t set n = n + 10 where id in (5, 6, 200);
        """
    )
    with caplog.at_level(logging.DEBUG, logger="pgferry.apply.replay.one_connection"):
        pair.catch_up(worker)
    pair.same("t")
    merged = [r.getMessage() for r in caplog.records if "ranges merged" in r.getMessage()]
    assert bool(merged) == (merge == "on")
    total = ApplyStats()
    for stats in seen:
        total.add(stats)
    # Each key once: 198 rows; 5 came back once, however many ranges updated it, and the
    # delete of 150 found nothing.
    assert (total.upserts, total.deletes) == (198, 1)
    assert (total.recreated, total.missing_deletes) == (1, 1)
    assert total.diverged == {"public.t": (1, 1)}
    # A key inserted, updated, deleted and inserted again across ranges; a table of
    # inserts and updates (the stage holds both ops).
    pair.root(
        """
        insert into t values (1001, 'new', 1);
        update t set n = n + 1 where id > 100;
        update t set n = 2 where id = 1001;
        delete from t where id = 1001;
        update t set v = 'third' where id <= 100;
        insert into t values (1001, 'again', 3);
        """
    )
    pair.catch_up(worker)
    pair.same("t")


def test_a_range_that_never_arrives_fails_the_batch(db_b: str) -> None:
    """A table whose ranges did not all arrive is never left staged and unapplied inside a
    transaction that goes on to commit: the batch fails instead."""
    route = Route(
        table_name="s.big", dest_schema="s", dest_name="big", pk=("id",), columns=("id", "v"),
        types=("integer", "text"), merge_state="ok", copy_condition=None, copy_snapshot=None,
        skip_truncate=False, dest_fq="s.big",
    )  # fmt: skip
    work = TableWork(route, ("id", "v"), 10, False, None, merge=True, ranges=2)
    with psycopg.connect(db_b) as conn:
        conn.execute("create schema s; create table s.big (id integer primary key, v text)")
        with pytest.raises(ReplayError, match="1 of its ranges never arrived"):
            apply_parts(conn, StageTables(), [(work, [b"U\t1\tx\n"])], 0, None)
        assert conn.execute("select count(*) from s.big").fetchone() == (0,)
