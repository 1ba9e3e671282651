"""Connect strings naming several servers (a primary and its standbys): how pgferry names
them in its lines, which server a connection reached, and the reconnect that waits for a
failover (pgferry.db).  The failover itself is tests/e2e/test_follow_primary.py."""

from __future__ import annotations

import time

import pytest

from pgferry.db import connect, describe, host_count, mask_connstr, reconnect, server_of
from pgferry.errors import DatabaseError
from pgferry.testing.cluster import LocalCluster, free_port


def test_describe_pairs_each_host_with_its_port() -> None:
    dsn = "host=db1,db2 port=5432,5433 dbname=shop target_session_attrs=read-write"
    assert describe(dsn) == "db1:5432,db2:5433/shop"
    assert describe("host=db1,db2 port=6432 dbname=shop") == "db1:6432,db2:6432/shop"
    assert describe("postgresql://db1:5432,db2:5433/shop") == "db1:5432,db2:5433/shop"
    assert describe("host=db1 dbname=shop") == "db1:5432/shop"


def test_host_count() -> None:
    assert host_count("host=db1,db2,db3 dbname=shop") == 3
    assert host_count("postgresql://db1:5432,db2:5433/shop") == 2
    assert host_count("host=db1 dbname=shop") == 1
    assert host_count("not a connect string") == 1


def test_a_password_of_a_multi_host_uri_is_masked() -> None:
    text = "postgresql://ferry:s3cr3t@db1:5432,db2:5433/shop?target_session_attrs=read-write"
    masked = mask_connstr(text)
    assert "s3cr3t" not in masked and "db2:5433/shop" in masked


def test_the_server_reached_is_the_one_that_answered(pg_a: LocalCluster) -> None:
    dead = free_port()
    dsn = f"host=127.0.0.1,127.0.0.1 port={dead},{pg_a.port} user=postgres dbname=postgres"
    with connect(dsn, autocommit=True) as conn:
        assert server_of(conn) == f"127.0.0.1:{pg_a.port}"


def test_a_single_server_refusing_is_not_waited_for() -> None:
    started = time.monotonic()
    with pytest.raises(DatabaseError, match="cannot connect to 127.0.0.1:"):
        reconnect(f"host=127.0.0.1 port={free_port()} user=postgres", wait=30)
    assert time.monotonic() - started < 10


def test_several_servers_are_tried_until_the_wait_ends() -> None:
    ports = f"{free_port()},{free_port()}"
    started = time.monotonic()
    with pytest.raises(DatabaseError, match=r"tried for 1\.5 s") as caught:
        reconnect(f"host=127.0.0.1,127.0.0.1 port={ports} user=postgres", wait=1.5)
    assert time.monotonic() - started >= 1.5
    assert str(caught.value).count("\n") == 0
