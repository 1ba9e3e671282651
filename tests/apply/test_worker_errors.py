"""Failures are recorded in local_state.cur_error, retried, and cleared after success."""

from __future__ import annotations

import psycopg
import pytest

from pgferry.apply.worker import Worker
from pgferry.errors import PgferryError


def _cur_error(pair) -> str | None:
    return pair.leaf("select cur_error from ferry_node.local_state")[0][0]


def test_failing_statement_recorded_then_cleared(pair) -> None:
    pair.root("create table public.t (id int primary key, v int)")
    pair.leaf("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t")
    worker = pair.catch_up()
    # A check the source does not have: replay of v < 0 fails on the leaf.
    pair.leaf("alter table t add constraint v_positive check (v >= 0)")
    pair.root("insert into t values (1, -1)")
    tick = pair.tick()
    with pytest.raises(PgferryError, match="v_positive") as failure:
        worker.work()
    worker.on_error(failure.value)
    assert "v_positive" in (_cur_error(pair) or "")
    assert pair.last_tick() != tick
    # The same batch fails again on retry, nothing is half-applied.
    with pytest.raises(PgferryError):
        worker.work()
    assert pair.leaf("select count(*) from t") == [(0,)]
    pair.leaf("alter table t drop constraint v_positive")
    pair.catch_up(worker)
    assert _cur_error(pair) is None
    pair.same("t")


def test_unreachable_provider_is_recorded(pair) -> None:
    pair.leaf(
        "update ferry_node.node_location set node_location = 'host=127.0.0.1 port=1 "
        "password=sekret' where node_name = 'rootnode'"
    )
    worker = Worker(pair.leaf_cfg)
    with pytest.raises(PgferryError) as failure:
        worker.work()
    worker.on_error(failure.value)
    text = _cur_error(pair) or ""
    assert "cannot connect" in text and "sekret" not in text


def test_replica_role_refused_names_the_remedy(pair) -> None:
    role = "ferry_plain_user"
    pair.leaf(f"drop role if exists {role}; create role {role} login")
    worker = Worker(pair.leaf_cfg)
    dsn = pair.leaf_dsn + f" user={role}"
    with psycopg.connect(dsn) as conn, pytest.raises(PgferryError) as failure:
        worker.conns.set_replica_role(conn)
    text = str(failure.value)
    assert "session_replication_role" in text
    assert "GRANT SET ON PARAMETER session_replication_role" in text


def test_second_worker_for_one_node_is_refused(pair) -> None:
    pair.root("create table public.t (id int primary key)")
    pair.leaf("create table public.t (id int primary key)")
    pair.add_tables("public.t")
    first = pair.catch_up()
    second = Worker(pair.leaf_cfg)
    with pytest.raises(PgferryError, match="Another worker is already running"):
        second.work()
    first.shutdown()
    pair.catch_up(second)
    second.shutdown()
