"""README.md's "A first replication" runs as written, so it cannot rot.

The session is read from README.md itself: each fenced block opened with ```` ```ini
file=NAME ```` is written to NAME, each ```` ```sh session ```` block is run line by line
in a shell (``pgferry`` and ``psql`` on PATH), in a fresh directory.  Only the hosts are
replaced: ``host=db1 dbname=app`` and ``host=db2 dbname=app`` by fresh databases on the
session clusters A and B, the ticker's ``host=db1`` and ``database_list = app`` by cluster
A and that database.  Workers and the ticker run as ``-d`` daemons with their pidfiles in
the directory, stopped by the README's own last block (and here, should a line fail).
Afterwards both sides must hold the same rows and the copy's sequence be no lower.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pgferry.daemon import pid_alive, read_pid
from pgferry.testing.cluster import find_pg_tool
from pgferry.testing.scenario import process_running, sql, wait_until

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"^```(ini file=(?P<file>\S+)|sh session)\n(?P<body>.*?)^```\n", re.M | re.S)


def section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## A first replication")
    return text[start : text.index("\n## ", start + 1)]


def blocks() -> list[tuple[str | None, str]]:
    """(file name, text) of the ini blocks and (None, text) of the shell blocks, in order."""
    return [(m["file"], m["body"]) for m in BLOCK.finditer(section())]


def test_readme_opens_with_make_demo_and_make_test() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[2].split("#")[0].split() == ["make", "demo"]
    assert lines[3].split("#")[0].split() == ["make", "test"]


def test_the_session_is_complete() -> None:
    found = blocks()
    files = [name for name, _ in found if name]
    assert files == ["src.ini", "dst.ini", "pgqd.ini"]
    commands = "\n".join(body for name, body in found if name is None)
    for needed in ("ticker", "add-table", "add-seq", "wait-sync", "compare", "-s pgqd.ini"):
        assert needed in commands


@pytest.mark.slow
def test_readme_session_runs_as_written(pg_a, pg_b, new_db_a, new_db_b, tmp_path: Path) -> None:
    name = f"app_readme_{os.getpid()}"
    src, dst = new_db_a(name), new_db_b(name)
    swaps = {
        "host=db1 dbname=app": src,
        "host=db2 dbname=app": dst,
        "base_connstr = host=db1": f"base_connstr = {pg_a.connstr('').rsplit(' dbname=', 1)[0]}",
        "database_list = app": f"database_list = {name}",
    }

    def real(text: str) -> str:
        for old, new in swaps.items():
            text = text.replace(old, new)
        return text

    env = dict(os.environ)
    tools = [str(Path(sys.executable).parent), str(Path(find_pg_tool("psql")).parent)]
    env["PATH"] = os.pathsep.join([*tools, env.get("PATH", "")])
    try:
        for file, body in blocks():
            if file:
                (tmp_path / file).write_text(real(body), encoding="utf-8")
                continue
            for line in body.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                proc = subprocess.run(
                    ["bash", "-c", real(line)],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
        pids = [tmp_path / "pid" / f"{job}.pid" for job in ("src_node", "dst_node", "pgqd")]
        wait_until(lambda: not any(_running(p) for p in pids), 60, "the daemons to stop")
    finally:
        for pidfile in (tmp_path / "pid").glob("*.pid"):
            pid = read_pid(pidfile)
            if pid is not None and pid_alive(pid):  # a line failed before the last block
                os.kill(pid, signal.SIGTERM)
    for table in ("app.customers", "app.orders"):
        query = f"select t::text from {table} t order by t.id"
        assert sql(src, query) == sql(dst, query), table
    assert len(sql(dst, "select * from app.orders")) == 3
    src_seq = sql(src, "select last_value from app.orders_id_seq")[0][0]
    dst_seq = sql(dst, "select last_value from app.orders_id_seq")[0][0]
    assert dst_seq >= src_seq


def _running(pidfile: Path) -> bool:
    pid = read_pid(pidfile)
    return pid is not None and process_running(pid)
