"""A leaf behind its provider replays rows queued between two captured RENAME COLUMNs
with their values, although the provider's catalog already shows the later rename."""

from __future__ import annotations

import psycopg
import pytest

from pgferry.testing.cascade import Cascade

SCHEMA = """
create schema app;
create table app.t (id serial primary key, memo text, n int, "Wide Col" text, k int);
create table app.other (id int primary key, w int);
insert into app.other select g, 0 from generate_series(1, 10) g;
"""
COLUMNS = ["memo", "memo1"]


def _rows(c: Cascade, node: str) -> list[tuple]:
    return c.sql(node, 'select id, m, n, "Wide Col", k from (select * from app.t) t'
                 " cross join lateral (select to_jsonb(t) ->> %s) m(m) order by id",
                 (_name(c, node),))  # fmt: skip


def _name(c: Cascade, node: str) -> str:
    return c.sql(node, "select attname::text from pg_attribute where attrelid = 'app.t'::regclass"
                 " and attname like 'memo%%' and not attisdropped")[0][0]  # fmt: skip


def _write(c: Cascade, step: int, memo: str) -> None:
    """A round of writes as a pgbench script makes them: an update of another table and
    an insert into the renamed one, in one transaction; then an update of older rows (a
    fifth of them never: an update's whole row would mend a value lost before)."""
    with psycopg.connect(c.dsns["root"], autocommit=True) as conn:
        for i in range(20):
            with conn.transaction():
                conn.execute("update app.other set w = w + 1 where id = %s", (i % 10 + 1,))
                conn.execute("insert into app.t values (default, %s, %s, %s, %s)",
                             (f"w{step}.{i}", step, f"c{i}", i))  # fmt: skip
        conn.execute(f"update app.t set {memo} = {memo} || '+', k = k + 1"
                     f" where id % 3 = {step % 3} and id % 5 <> 0")  # fmt: skip


def _restart(c: Cascade, node: str) -> None:
    """The node's worker stopped; the next one starts with nothing cached."""
    old = c.workers.pop(node)
    lock = old.conns.lock
    pid = lock.info.backend_pid if lock is not None and not lock.closed else 0
    old.conns.close()
    gone = "select count(*) from pg_stat_activity where pid = %s"
    c.wait_for(lambda: c.sql(node, gone, (pid,)) == [(0,)], what="the old worker's session to end")


@pytest.mark.parametrize(
    ("settings", "restart"),
    [
        ({}, False),  # small batches, read inline (one array per table)
        # Every batch takes the large path: reader threads, ranges, reads ahead of the next.
        ({"replay_read_ahead_events": "0", "replay_read_range_events": "7"}, False),
        # Started behind: the first batch, without a script, meets the renamed catalog.
        ({}, True),
    ],
    ids=["small", "large", "restarted"],
)
def test_rows_between_renames_keep_their_values(make_cascade, new_db_a, new_db_b,
                                                 settings, restart) -> None:  # fmt: skip
    c = make_cascade()
    c.node("root", new_db_a(), "root")
    # One tick per batch while behind: each rename's batch is applied while the provider
    # already shows the renames after it.
    c.node("leaf", new_db_b(), "leaf", "root", pgq_batch_collect_events="1", **settings)
    for node in ("root", "leaf"):
        c.sql(node, SCHEMA)
    # A column of the leaf's own keeps its values: the rows do not carry it either.
    c.sql("leaf", "alter table app.t add column here text default 'mine'")
    c.add("root", "app.t", "app.other")
    c.add("leaf", "app.t", "app.other")
    c.catch_up("leaf")
    assert c.cli("root", "capture-ddl", "on").code == 0
    _write(c, 0, "memo")
    c.tick()
    for step in range(1, 6):  # renamed and back, the leaf lagging behind all of it
        old, new = COLUMNS[(step - 1) % 2], COLUMNS[step % 2]
        c.sql("root", f"alter table app.t rename column {old} to {new}")
        _write(c, step, new)
        c.tick()
    if restart:
        _restart(c, "leaf")
    c.catch_up("leaf")
    assert _name(c, "leaf") == _name(c, "root") == "memo1"
    leaf, root = _rows(c, "leaf"), _rows(c, "root")
    assert len(root) == 120 and all(r[1] is not None for r in root)
    assert leaf == root
    assert c.sql("leaf", "select here, count(*) from app.t group by 1") == [("mine", 120)]
    q = "select id, w from app.other order by id"
    assert c.sql("leaf", q) == c.sql("root", q)
