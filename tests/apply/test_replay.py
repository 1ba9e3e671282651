"""Batch replay into a leaf: row changes, collapse, truncate, rename, condition filter."""

from __future__ import annotations

import logging

import pytest

TABLE = """
create table public.users (
    id int primary key, name text, score numeric, born date, seen timestamptz,
    tags text[], blob bytea, info jsonb, ratio double precision
)
"""


def _setup(pair, *, leaf_ddl: str = TABLE, **opts) -> None:
    pair.root(TABLE)
    pair.leaf(leaf_ddl)
    pair.add_tables("public.users", **opts)


@pytest.mark.parametrize("spark_path", [False, True], ids=["driver", "spark"])
def test_row_changes_replicate(make_pair, spark_path) -> None:
    pair = make_pair(replay_local_events="0" if spark_path else "100000")
    pair.root(TABLE)
    pair.root(
        "insert into users select g, 'n' || g, g * 1.5, date '2020-01-01' + g, now(),"
        " array['a', 'b'], '\\x0001'::bytea, '{\"k\": 1}', 'NaN' from generate_series(1, 50) g"
    )
    pair.leaf(TABLE)
    pair.add_tables("public.users")
    worker = pair.worker()
    if spark_path:  # up, as after a copy of tables too large for the driver
        worker.replay.spark.get()
    pair.catch_up(worker)  # initial copy + hand-over
    pair.same("users")
    pair.root("insert into users (id, name) select g, 'x' from generate_series(51, 80) g")
    pair.root("update users set name = 'upd', ratio = 'Infinity' where id % 3 = 0")
    pair.root("delete from users where id % 7 = 0")
    pair.root("update users set id = id + 1000 where id = 1")  # primary-key change
    pair.catch_up(worker)
    pair.same("users")
    assert (worker.spark_batches > 0) == spark_path


def test_collapse_and_truncate_barrier(pair) -> None:
    _setup(pair)
    worker = pair.catch_up()
    pair.root("insert into users (id, name) values (1, 'a'), (2, 'b')")
    for i in range(20):
        pair.root("update users set name = %s where id = 1", (f"v{i}",))
    pair.root("truncate users")
    pair.root("insert into users (id, name) values (3, 'after')")
    pair.root("update users set name = 'after2' where id = 3")
    pair.catch_up(worker)
    pair.same("users")
    assert pair.leaf("select id, name from users") == [(3, "after2")]


@pytest.mark.parametrize("small", [True, False], ids=["one-round-trip", "table-by-table"])
def test_debug_log_times_each_table(make_pair, caplog, small) -> None:
    """With -v a batch logs, per table, its rows and where the time went: a small batch
    applied in one round trip says so; one applied table by table times its steps."""
    pair = make_pair(**({} if small else {"replay_read_ahead_events": "0"}))
    _setup(pair)
    worker = pair.catch_up()
    pair.root("insert into users (id, name) select g, 'x' from generate_series(1, 30) g")
    with caplog.at_level(logging.DEBUG, logger="pgferry.apply"):
        pair.catch_up(worker)
    lines = [m for r in caplog.records if (m := r.getMessage()).startswith("  public.users: ")]
    if small:
        assert lines == [
            "  public.users: 30 rows (read with the summary, then with the batch's other"
            " tables: staged and applied in one round trip)"
        ]
    else:
        assert lines == [lines[0]] and lines[0].startswith("  public.users: 30 rows (read wait ")
        assert "s, stage " in lines[0] and "s, apply " in lines[0]
    pair.same("users")


def test_rename_and_condition(pair) -> None:
    pair.root(TABLE)
    pair.root("insert into users (id, name) select g, 'n' from generate_series(1, 20) g")
    pair.leaf('create schema "Other Schema"')
    pair.leaf(TABLE.replace("public.users", '"Other Schema"."Üsers Copy"'))
    pair.add_tables(
        "public.users", dest_table='"Other Schema"."Üsers Copy"', copy_condition="id < 10"
    )
    worker = pair.catch_up()
    q = 'select t::text from "Other Schema"."Üsers Copy" t order by id'
    assert pair.leaf(q) == pair.root("select t::text from users t where id < 10 order by id")
    pair.root("update users set id = id + 100 where id = 5")  # leaves the condition
    pair.root("update users set id = 3 - id where id = 15")  # -12: enters it
    pair.root("insert into users (id, name) values (7000, 'out'), (-5, 'in')")
    pair.root("update users set name = 'changed' where id in (2, 11)")
    pair.catch_up(worker)
    assert pair.leaf(q) == pair.root("select t::text from users t where id < 10 order by id")
