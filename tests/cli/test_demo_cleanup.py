"""``make demo`` leaves nothing behind however it ends, and takes the ports it is given:
the demo's own ``run`` interrupted once its clusters are up (as Ctrl-C would), and its
port arguments checked in one line."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest
from rich.console import Console

from pgferry import demo
from pgferry.errors import PgferryError
from pgferry.testing.cluster import free_port


@pytest.fixture
def temp_root(monkeypatch) -> Path:
    """A temporary directory the demo makes its folders in (open to the OS user the
    clusters run as, when the tests run as root)."""
    path = Path(tempfile.mkdtemp(prefix="demo-cleanup-"))
    os.chmod(path, 0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_interrupted_demo_removes_its_folders(temp_root, monkeypatch) -> None:
    port = free_port()
    while not demo._port_free(port + 1):
        port = free_port()
    reached: list[str] = []

    def interrupt(connstr: str, text: str) -> None:
        # The servers are up on the ports asked for when the seed starts: Ctrl-C here.
        with psycopg.connect(connstr, autocommit=True) as conn:
            reached.append(conn.execute("show port").fetchone()[0])
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "sql", interrupt)
    with pytest.raises(KeyboardInterrupt):
        demo.run(Console(file=io.StringIO()), (port, port + 1))
    assert reached == [str(port)]
    assert list(temp_root.iterdir()) == []  # configs and both clusters' folders
    assert demo._port_free(port) and demo._port_free(port + 1)  # servers stopped


def test_ports_asked() -> None:
    assert demo.ports_asked([], {}) is None
    assert demo.ports_asked([], {demo.PORT_ENV: "5460"}) == (5460, 5461)
    assert demo.ports_asked(["--port", "5470"], {demo.PORT_ENV: "5460"}) == (5470, 5471)
    for argv, env, wanted in (
        (["--port", "x"], {}, "port 'x' is not a number"),
        ([], {demo.PORT_ENV: "-1"}, "is not a number"),
        (["--nosuch"], {}, "unknown argument --nosuch"),
    ):
        with pytest.raises(PgferryError, match=wanted):
            demo.ports_asked(argv, env)


def test_a_port_in_use_is_one_line(temp_root) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PgferryError, match=f"port {port} on 127.0.0.1 is in use"):
            demo.run(Console(file=io.StringIO()), (port, port + 1))
    assert list(temp_root.iterdir()) == []
