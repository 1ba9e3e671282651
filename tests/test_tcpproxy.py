"""The TCP proxy of the tests' network faults (:mod:`pgferry.testing.tcpproxy`), between a
client and a real PostgreSQL: it forwards, cuts what is open, refuses what is new, holds
bytes while paused, and forwards again when healed."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from pgferry.testing.cluster import LocalCluster
from pgferry.testing.scenario import wait_until
from pgferry.testing.tcpproxy import TcpProxy


@pytest.fixture
def proxy(pg_a: LocalCluster):
    with TcpProxy(("127.0.0.1", pg_a.port)) as made:
        yield made


def _one(dsn: str) -> int:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        return conn.execute("select 1").fetchone()[0]  # type: ignore[index]


def test_forwards_and_cuts(pg_a: LocalCluster, proxy: TcpProxy) -> None:
    dsn = proxy.connstr(pg_a.connstr())
    assert _one(dsn) == 1
    conn = psycopg.connect(dsn, autocommit=True)
    assert conn.execute("select pg_backend_pid()").fetchone()
    assert proxy.cut() == 1
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        conn.execute("select 1")
    assert time.monotonic() - started < 5  # a reset is seen at once, not after a timeout
    conn.close()
    assert _one(dsn) == 1  # new connections are still taken
    assert proxy.accepted == 3


def test_refuses_until_healed(pg_a: LocalCluster, proxy: TcpProxy) -> None:
    dsn = proxy.connstr(pg_a.connstr())
    proxy.refuse()
    with pytest.raises(psycopg.OperationalError, match="refused"):
        _one(dsn)
    proxy.heal()
    assert _one(dsn) == 1


def test_pause_holds_a_query_until_healed(pg_a: LocalCluster, proxy: TcpProxy) -> None:
    conn = psycopg.connect(proxy.connstr(pg_a.connstr()), autocommit=True)
    result: list[object] = []
    proxy.pause()
    asking = threading.Thread(
        target=lambda: result.append(conn.execute("select 42").fetchone()), daemon=True
    )
    asking.start()
    asking.join(0.5)  # a bounded look for what must not happen: no answer while paused
    assert asking.is_alive() and result == []
    proxy.heal()
    wait_until(lambda: result, 30, "the answer after the heal")
    assert result == [(42,)]
    conn.close()
