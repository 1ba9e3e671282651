"""Every connection gets TCP keepalives and a TCP user timeout (pgferry.db.NETWORK_DEFAULTS)
unless its connect string sets them; read back from the socket itself."""

from __future__ import annotations

import socket

from pgferry.apply.replay.part_reads import ReaderPool
from pgferry.db import NETWORK_DEFAULTS, connect


def _tcp(conn) -> dict[str, int]:
    sock = socket.socket(fileno=conn.pgconn.socket)  # libpq's socket, not ours to close
    try:
        return {
            "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }
    finally:
        sock.detach()


def test_every_connection_has_the_network_defaults(db_a: str) -> None:
    with connect(db_a, autocommit=True) as conn:
        assert _tcp(conn) == {
            "keepalive": 1,
            "idle": int(NETWORK_DEFAULTS["keepalives_idle"]),
            "interval": int(NETWORK_DEFAULTS["keepalives_interval"]),
            "count": int(NETWORK_DEFAULTS["keepalives_count"]),
            "user_timeout": int(NETWORK_DEFAULTS["tcp_user_timeout"]),
        }


def test_the_connect_string_wins(db_a: str) -> None:
    dsn = f"{db_a} keepalives_idle=7 keepalives_interval=2 tcp_user_timeout=5000"
    with connect(dsn, autocommit=True) as conn:
        got = _tcp(conn)
    assert (got["idle"], got["interval"], got["user_timeout"]) == (7, 2, 5000)
    assert got["count"] == int(NETWORK_DEFAULTS["keepalives_count"])


def test_replay_readers_have_them_too(db_a: str) -> None:
    """The reader threads' pool opens its connections itself, with the same defaults."""
    pool = ReaderPool(f"{db_a} tcp_user_timeout=4000", 1)
    try:
        assert pool._conns is not None
        with pool._conns.connection() as conn:
            got = _tcp(conn)
    finally:
        pool.close()
    assert got["idle"] == int(NETWORK_DEFAULTS["keepalives_idle"])
    assert got["user_timeout"] == 4000
    assert got["keepalive"] == 1
