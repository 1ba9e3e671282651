"""docs/lakehouse.md's walkthrough runs as written, so it cannot rot.

The section *Walkthrough on one machine* is read from the page: each ```` ```ini file=NAME
```` block is written to NAME, each line of the ```` ```sh ```` blocks (the lines of a
``psql -c`` joined) is run in a shell with ``pgferry``, ``psql`` and ``createdb`` on PATH
and ``PGHOST``/``PGPORT`` naming session cluster A, and the first ```` ```python ````
block reads the Delta table.  Only names are replaced: the databases ``app`` and
``lakestate`` get names of their own, ``host=localhost`` and ``dbname=…`` name cluster A,
``/tmp/lake`` is a fresh folder.  Every line must exit 0 (``compare`` included: the Delta
table equals the source), and the Delta table holds the 990 rows the page says.  The
section *Object storage* runs the same way with its own leaf.ini and environment, against
an S3-protocol server the test starts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pgferry.testing.cluster import find_pg_tool

PAGE = Path(__file__).resolve().parents[2] / "docs" / "lakehouse.md"
BLOCK = re.compile(r"^```(ini file=(?P<file>\S+)|sh|python)\n(?P<body>.*?)^```\n", re.M | re.S)


def section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## Walkthrough on one machine")
    return text[start : text.index("\n## ", start + 1)]


def test_the_walkthrough_is_complete() -> None:
    text = section()
    assert "createdb app && createdb lakestate" in text
    for needed in ("--handler=lake", "wait-sync", "compare", "-d pgqd.ini ticker", "990 rows"):
        assert needed in text


@pytest.mark.slow
def test_lakehouse_walkthrough_runs_as_written(pg_a, tmp_path: Path) -> None:
    _walkthrough(pg_a, tmp_path)


@pytest.mark.slow
def test_lakehouse_walkthrough_on_object_storage(pg_a, tmp_path: Path) -> None:
    """The same run with the leaf's ini and the environment of *Object storage*, against
    an S3-protocol server started here (moto's: no real cloud is reachable from the
    tests); the page's reader reads the 990 rows from the bucket, and no folder ``s3:``
    is made."""
    pytest.importorskip("deltalake")
    from pgferry.testing.s3 import moto_server

    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## Object storage")
    part = text[start : text.index("\n## ", start + 1)]
    blocks = list(BLOCK.finditer(part))
    leaf_ini = next(m["body"] for m in blocks if m["file"] == "leaf.ini")
    assert "lake_path = s3://lake/pgferry" in leaf_ini
    export = next(m["body"] for m in blocks if m.group(1) == "sh").strip()
    reader = next(m["body"] for m in blocks if m.group(1) == "python")
    with moto_server() as s3:
        s3.client.create_bucket(Bucket="lake")
        env = {}
        for pair in export.removeprefix("export ").split():
            name, value = pair.split("=", 1)
            env[name] = {"KEY": s3.key, "SECRET": s3.secret}.get(value, value)
        env["AWS_ENDPOINT_URL"] = s3.endpoint
        _walkthrough(pg_a, tmp_path, leaf_ini, env, reader)
        assert any(k.endswith(".parquet") for k in s3.keys("lake", "pgferry/public/orders/"))
    assert not (tmp_path / "s3:").exists()


def _walkthrough(
    pg_a,
    tmp_path: Path,
    leaf_ini: str | None = None,
    store_env: dict[str, str] | None = None,
    reader: str | None = None,
) -> None:
    """The walkthrough's blocks run; ``leaf_ini``, ``store_env`` and ``reader`` replace
    its leaf.ini, add to its environment and replace its reader."""
    pytest.importorskip("deltalake")
    tag = "_s3" if store_env else ""  # both runs of one session on cluster A
    app, state = f"app_lake{tag}_{os.getpid()}", f"lakestate{tag}_{os.getpid()}"
    server = pg_a.connstr("").rsplit(" dbname=", 1)[0]
    fields = dict(part.split("=", 1) for part in server.split())
    lake = tmp_path / "lake"

    def real(text: str) -> str:
        text = text.replace("host=localhost", server).replace("/tmp/lake", str(lake))
        text = text.replace("dbname=app", f"{server} dbname={app}")
        text = text.replace("dbname=lakestate", f"{server} dbname={state}")
        text = re.sub(r"\blakestate\b", state, text)
        return re.sub(r"(?<![\w./=])app\b", app, text)

    env = dict(os.environ, PGHOST=fields["host"], PGPORT=fields["port"], PGUSER="postgres")
    env.update(store_env or {})
    tools = [str(Path(sys.executable).parent), str(Path(find_pg_tool("psql")).parent)]
    env["PATH"] = os.pathsep.join([*tools, env.get("PATH", "")])
    python_blocks = []
    try:
        for match in BLOCK.finditer(section()):
            body = match["body"]
            if match["file"]:
                if match["file"] == "leaf.ini" and leaf_ini is not None:
                    body = leaf_ini
                (tmp_path / match["file"]).write_text(real(body), encoding="utf-8")
                continue
            if match.group(1) == "python":
                python_blocks.append(real(body))
                continue
            for line in re.sub(r"\n\s+(?=\S)", " ", body).splitlines():
                if not line.strip():
                    continue
                proc = subprocess.run(
                    ["bash", "-c", real(line)], cwd=tmp_path, env=env,
                    capture_output=True, text=True, timeout=300,
                )  # fmt: skip
                assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
        read = subprocess.run(
            [sys.executable, "-c", reader or python_blocks[0]], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert read.returncode == 0, read.stderr
        assert read.stdout.splitlines()[0].split()[-1] == "990", read.stdout
    finally:
        for ini in ("leaf.ini", "root.ini", "pgqd.ini"):
            if (tmp_path / ini).exists():
                subprocess.run(
                    [sys.executable, "-m", "pgferry", "-s", ini], cwd=tmp_path, env=env,
                    capture_output=True, timeout=60,
                )  # fmt: skip
