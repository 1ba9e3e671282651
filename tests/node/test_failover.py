"""Failover of a side to a real streaming standby (pg_basebackup -R, pg_ctl promote), the
nodes reaching it through a connect string naming both servers with
target_session_attrs=read-write.

A synchronous standby has every tick: replication carries on.  An asynchronous one lacks
the last ticks: the subscriber that applied them must call the provider diverged (never
"repositioned", which would skip the new primary's events under reused tick ids), and
reconcile.  A subscriber that fails over to a lagging standby rewinds its provider.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from pgferry.testing.cascade import Cascade
from pgferry.testing.cluster import LocalCluster, make_cluster
from pgferry.testing.standby import Standby, both_hosts, make_standby

TABLE = 'public."Fail é"'
CREATE = f'create table {TABLE} (id int primary key, "Val" text)'


class Side:
    """A primary and its standby: one database reached on whichever is primary."""

    def __init__(self, name: str, *, sync: bool) -> None:
        # In the system's temporary folder: the server's OS user must reach it.
        self.primary: LocalCluster = make_cluster(f"{name}p")
        self.primary.createdb("db")
        self.standby: Standby = make_standby(self.primary, f"{name}s", sync=sync)
        self.dsn = both_hosts(self.primary, self.standby.cluster, "db")

    def fail_over(self) -> None:
        """The primary dies at once; the standby takes over with what it has."""
        self.primary.stop("immediate")
        self.standby.promote()

    def destroy(self) -> None:
        self.primary.destroy(background=True)
        self.standby.destroy()


@pytest.fixture
def sides() -> Iterator[Callable[..., Side]]:
    made: dict[str, Side] = {}

    def side(name: str, *, sync: bool) -> Side:
        made[name] = Side(name, sync=sync)
        return made[name]

    yield side
    for s in made.values():
        s.destroy()


def _rows(cascade: Cascade, node: str) -> list[tuple]:
    return cascade.sql(node, f'select id, "Val" from {TABLE} order by id')


def _write(cascade: Cascade, ids: range, val: str) -> None:
    insert = f"insert into {TABLE} select g, %s from generate_series(%s::int, %s::int) g"
    cascade.sql("root", insert, (val, ids.start, ids.stop - 1))


def _root_leaf(make_cascade, root_dsn: str, leaf_dsn: str, **leaf: str) -> Cascade:
    cascade = make_cascade()
    cascade.node("root", root_dsn, "root")
    cascade.node("leaf", leaf_dsn, "leaf", "root", **leaf)
    for name in ("root", "leaf"):
        cascade.sql(name, CREATE)
        cascade.add(name, TABLE)
    _write(cascade, range(1, 11), "before")
    # The worker loops as the daemon does: a connection lost in the failover is an error
    # of one loop, and the next loop connects to whichever server is primary.
    cascade.start("leaf")
    cascade.catch_up("leaf")
    return cascade


def test_sync_provider_fails_over_nothing_lost(make_cascade, sides, db_b) -> None:
    side = sides("prov", sync=True)
    cascade = _root_leaf(make_cascade, side.dsn, db_b)
    _write(cascade, range(11, 21), "last")
    cascade.tick()
    side.fail_over()
    _write(cascade, range(21, 31), "after")
    cascade.catch_up("leaf")
    assert _rows(cascade, "leaf") == _rows(cascade, "root")
    assert len(_rows(cascade, "root")) == 30


def _lose_ticks(make_cascade, sides, db_b, **leaf: str) -> tuple[Cascade, int]:
    """Root on a pair failed over to an async standby that lacked the old primary's last
    40 ticks (rows 11-50, applied on the leaf); the new primary's ticks then pass the
    leaf's, with rows written after the failover (ids from 100).  Returns the cascade and
    the leaf's last tick from the old primary."""
    side = sides("prov", sync=False)
    cascade = _root_leaf(make_cascade, side.dsn, db_b, **leaf)
    side.standby.wait_caught_up()
    side.standby.cut_off()
    # More ticks than a sequence logs ahead (32): the new primary makes the leaf's tick id.
    for i in range(11, 51):
        _write(cascade, range(i, i + 1), "lost")
        cascade.tick()
    cascade.catch_up("leaf")
    applied = cascade.last_tick("leaf")
    assert applied is not None
    cascade.stop("leaf")
    side.fail_over()
    made = 0
    while made <= applied + 1:
        _write(cascade, range(100 + made, 101 + made), "after")
        made = cascade.tick()
    held = "select count(*) from ferry_queue.tick where tick_id = %s"
    assert cascade.sql("root", held, (applied,)) == [(1,)]  # the same id, another tick
    return cascade, applied


def test_async_provider_lost_ticks_reconciled(make_cascade, sides, db_b) -> None:
    """The worker must not take the new primary's tick of the same id for its own (it would
    skip the new primary's events up to there and keep the lost rows): it saves the lost
    rows, repositions at the last common tick, repairs the table, replays on."""
    cascade, applied = _lose_ticks(make_cascade, sides, db_b)
    cascade.start("leaf")
    cascade.catch_up("leaf")
    assert _rows(cascade, "leaf") == _rows(cascade, "root")
    assert [r for r in _rows(cascade, "root") if r[1] == "lost"] == []
    assert len([r for r in _rows(cascade, "root") if r[1] == "after"]) > 10
    lost = cascade.sql(
        "leaf",
        "select table_name, held_here ->> 'id', held_here ->> 'Val', on_provider, lost_tick"
        " from ferry_node.lost_after_failover order by (held_here ->> 'id')::int",
    )
    assert lost == [(TABLE, str(i), "lost", None, applied) for i in range(11, 51)]
    res = cascade.cli("leaf", "status")
    assert "40 rows lost in a provider's failover" in res.out, res.out


def test_async_provider_lost_ticks_stop(make_cascade, sides, db_b) -> None:
    """failover_reconcile = stop: the worker stops on the diverged provider, nothing moves."""
    cascade, applied = _lose_ticks(make_cascade, sides, db_b, failover_reconcile="stop")
    before = _rows(cascade, "leaf")
    cascade.start("leaf")
    runner = cascade.runners["leaf"]
    cascade.wait_for(
        lambda: any("Diverged provider" in e for e in runner.errors), what="diverged provider"
    )
    assert cascade.last_tick("leaf") == applied
    assert _rows(cascade, "leaf") == before


def test_subscriber_fails_over_to_a_lagging_standby(make_cascade, sides, db_a) -> None:
    """The leaf's standby lacks its last applied batches: its recorded tick is older than
    its position on the provider, which it rewinds; the events are applied again."""
    side = sides("leaf", sync=False)
    cascade = _root_leaf(make_cascade, db_a, side.dsn)
    side.standby.wait_caught_up()
    side.standby.cut_off()
    _write(cascade, range(11, 31), "lost here")
    cascade.catch_up("leaf")
    applied = cascade.last_tick("leaf")
    cascade.stop("leaf")
    side.fail_over()
    assert (cascade.last_tick("leaf") or 0) < (applied or 0)  # the standby lags
    _write(cascade, range(31, 41), "after")
    cascade.start("leaf")
    cascade.catch_up("leaf")
    assert _rows(cascade, "leaf") == _rows(cascade, "root")
    assert len(_rows(cascade, "leaf")) == 40
    assert cascade.sql("leaf", "select count(*) from ferry_node.lost_after_failover") == [(0,)]


def test_branch_in_the_middle_reconciles(make_cascade, sides, new_db_b) -> None:
    """root (failed over, lost ticks) -> branch -> leaf: the branch reconciles with the new
    root, cutting its queue back; the leaf then reconciles with the branch."""
    side = sides("prov", sync=False)
    cascade = make_cascade()
    cascade.node("root", side.dsn, "root")
    cascade.node("branch", new_db_b(None), "branch", "root")
    cascade.node("leaf", new_db_b(None), "leaf", "branch")
    for name in ("root", "branch", "leaf"):
        cascade.sql(name, CREATE)
        cascade.add(name, TABLE)
    _write(cascade, range(1, 11), "before")
    cascade.start("branch", "leaf")
    cascade.catch_up("branch", "leaf")
    side.standby.wait_caught_up()
    side.standby.cut_off()
    for i in range(11, 51):
        _write(cascade, range(i, i + 1), "lost")
        cascade.tick()
    cascade.catch_up("branch", "leaf")
    applied = cascade.last_tick("leaf")
    assert applied is not None
    cascade.stop("branch", "leaf")
    side.fail_over()
    made = 0
    while made <= applied + 1:
        _write(cascade, range(100 + made, 101 + made), "after")
        made = cascade.tick()
    cascade.start("branch", "leaf")
    cascade.catch_up("branch", "leaf")
    expected = _rows(cascade, "root")
    assert [r for r in expected if r[1] == "lost"] == []
    assert _rows(cascade, "branch") == expected
    assert _rows(cascade, "leaf") == expected
    for node in ("branch", "leaf"):
        lost = cascade.sql(
            node,
            "select distinct held_here ->> 'Val', on_provider is null"
            " from ferry_node.lost_after_failover",
        )
        assert lost == [("lost", True)], node


def test_lost_row_written_again_alike_is_listed(make_cascade, sides, db_b) -> None:
    """A row the leaf changed in a tick the standby lacked, which the application then
    writes on the new primary to the very same values before the leaf reconciles (a
    counter raised from the same value within the same second): the rows compare equal,
    yet the change the leaf held was lost.  The new primary's events after the common tick
    name the row: it is listed, its new row beside."""
    side = sides("prov", sync=False)
    cascade = _root_leaf(make_cascade, side.dsn, db_b)
    side.standby.wait_caught_up()
    side.standby.cut_off()
    cascade.sql("root", f"""update {TABLE} set "Val" = 'lost' where id in (3, 4)""")
    cascade.catch_up("leaf")
    cascade.stop("leaf")
    side.fail_over()
    cascade.sql("root", f"""update {TABLE} set "Val" = 'lost' where id = 3""")  # made again
    cascade.tick()
    cascade.start("leaf")
    cascade.catch_up("leaf")
    assert _rows(cascade, "leaf") == _rows(cascade, "root")
    lost = cascade.sql(
        "leaf",
        "select row_key, held_here ->> 'Val', on_provider ->> 'Val'"
        " from ferry_node.lost_after_failover order by row_key",
    )
    assert lost == [("(3)", "lost", "lost"), ("(4)", "lost", "before")]
