"""The README's first replication and the lakehouse walkthrough without a superuser.

The session is the one ``test_readme.py`` runs, read from README.md, with one step before
its first ``pgferry`` line: a superuser runs the script ``pgferry CONFIG.ini grants`` prints
on each side (the root's as ``--provider`` with the README's tables and sequence, the
leaf's as ``--subscriber``).  Every ``pgferry`` line, ini file and connect string then
names the admin role that script makes, which is no superuser; ``psql`` lines stay the
application's: the superuser makes the schema and tables, and the row written after the
copy is written by an application role with only INSERT on ``app.orders`` (and USAGE on its
sequence) when ``writer`` says so, and the leaf's tables are made by ``add-table
--create`` or beforehand by the superuser (``grants --subscriber --table`` then makes them
the admin's).  Afterwards both sides hold the same rows, the pgferry schemas and the leaf's
tables are the admin's, and the admin is no superuser.

docs/lakehouse.md's walkthrough (as ``test_lakehouse_doc.py`` runs it, on one cluster) runs
the same way: ``PGUSER`` is the admin for every ``pgferry`` line and ``postgres`` for the
others, the grants run before the first ``pgferry`` line, and the Delta table holds the
990 rows the page says.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_lakehouse_doc import BLOCK
from test_lakehouse_doc import section as lakehouse_section
from test_readme import blocks

from pgferry.daemon import pid_alive, read_pid
from pgferry.testing.cluster import find_pg_tool
from pgferry.testing.scenario import process_running, sql, wait_until

_runs = itertools.count()
APP_DB1 = "host=db1 dbname=app"
APP_DB2 = "host=db2 dbname=app"
GRANTS_ROOT = (
    "grants --provider --table app.orders app.customers --seq app.orders_id_seq"
    " --role-prefix {prefix}"
)
GRANTS_LEAF = "grants --subscriber --role-prefix {prefix}"
# The leaf's tables made beforehand by the superuser: the grants make them the admin's.
GRANTS_LEAF_TABLES = (
    "grants --subscriber --table app.orders app.customers --seq app.orders_id_seq"
    " --role-prefix {prefix}"
)


def _as(connstr: str, role: str) -> str:
    assert " user=postgres " in f" {connstr} "
    return f" {connstr} ".replace(" user=postgres ", f" user={role} ").strip()


def _run(line: str, cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, (line, proc.stdout, proc.stderr)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("writer", "leaf_tables"),
    [("superuser", "made by add-table --create"), ("application role", "made beforehand")],
)
def test_readme_session_runs_without_a_superuser(
    pg_a, pg_b, new_db_a, new_db_b, tmp_path: Path, writer: str, leaf_tables: str
) -> None:
    name = f"app_roles_{os.getpid()}_{next(_runs)}"
    prefix = f"{name}_"  # roles are the cluster's: one set per run
    admin, app = f"{prefix}admin", f"{prefix}app"
    src, dst = new_db_a(name), new_db_b(name)
    host_a = _as(pg_a.connstr("").rsplit(" dbname=", 1)[0], admin)
    ferry = {  # what pgferry's ini files and lines connect with
        APP_DB1: _as(src, admin),
        APP_DB2: _as(dst, admin),
        "base_connstr = host=db1": f"base_connstr = {host_a}",
        "database_list = app": f"database_list = {name}",
    }
    writes = {APP_DB1: src if writer == "superuser" else _as(src, app), APP_DB2: dst}
    beforehand = leaf_tables == "made beforehand"

    def real(text: str, swaps: dict[str, str]) -> str:
        for old, new in swaps.items():
            text = text.replace(old, new)
        return text

    env = dict(os.environ)
    tools = [str(Path(sys.executable).parent), str(Path(find_pg_tool("psql")).parent)]
    env["PATH"] = os.pathsep.join([*tools, env.get("PATH", "")])
    granted = False
    try:
        for file, body in blocks():
            if file:
                (tmp_path / file).write_text(real(body, ferry), encoding="utf-8")
                continue
            for line in body.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if line.startswith("psql"):
                    # The application's own statements: made by the superuser, the row
                    # written after the copy by ``writes``'s role.
                    after_copy = granted and "insert" in line
                    _run(real(line, writes if after_copy else {APP_DB1: src, APP_DB2: dst}),
                         tmp_path, env)  # fmt: skip
                    if beforehand and "create table" in line:  # the same tables on the leaf
                        _run(real(line.replace(APP_DB1, APP_DB2), {APP_DB2: dst}), tmp_path, env)
                    continue
                if not granted:
                    _grant(tmp_path, env, prefix, src, dst, app, beforehand)
                    granted = True
                _run(real(line, ferry), tmp_path, env)
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
    assert sql(dst, "select last_value from app.orders_id_seq") >= sql(
        src, "select last_value from app.orders_id_seq"
    )
    for side in (src, dst):
        assert sql(side, f"select rolsuper from pg_roles where rolname = '{admin}'") == [(False,)]
        owners = sql(
            side,
            "select distinct nspowner::regrole::text from pg_namespace where nspname in"
            " ('ferry_queue', 'ferry_node', 'ferry', 'ferry_copy')",
        )
        assert owners == [(admin,)]
    assert sql(dst, "select distinct relowner::regrole::text from pg_class c"
               " where relnamespace = 'app'::regnamespace") == [(admin,)]  # fmt: skip
    if beforehand:  # the superuser's tables, given to the admin by the grants
        assert sql(dst, "select nspowner::regrole::text from pg_namespace"
                   " where nspname = 'app'") == [("postgres",)]  # fmt: skip


def _grant(
    cwd: Path, env: dict[str, str], prefix: str, src: str, dst: str, app: str, beforehand: bool
) -> None:
    """What a superuser runs once per side: the printed grants, and the application's role."""
    psql = "psql -X -q -v ON_ERROR_STOP=1"
    leaf = (GRANTS_LEAF_TABLES if beforehand else GRANTS_LEAF).format(prefix=prefix)
    _run(f'pgferry src.ini {GRANTS_ROOT.format(prefix=prefix)} | {psql} "{src}"', cwd, env)
    _run(f'pgferry dst.ini {leaf} | {psql} "{dst}"', cwd, env)
    # Run twice, nothing changes and nothing fails.
    _run(f'pgferry src.ini {GRANTS_ROOT.format(prefix=prefix)} | {psql} "{src}"', cwd, env)
    app_role = (
        f"create role {app} login; grant usage on schema app to {app};"
        f" grant select, insert on app.orders to {app};"
        f" grant usage on sequence app.orders_id_seq to {app}"
    )
    _run(f'{psql} "{src}" -c "{app_role}"', cwd, env)


def _running(pidfile: Path) -> bool:
    pid = read_pid(pidfile)
    return pid is not None and process_running(pid)


@pytest.mark.slow
def test_lakehouse_walkthrough_runs_without_a_superuser(pg_a, tmp_path: Path) -> None:
    pytest.importorskip("deltalake")
    tag = f"{os.getpid()}_{next(_runs)}"
    app, state, prefix = f"app_lkr_{tag}", f"lakestate_r_{tag}", f"lkr_{tag}_"
    admin = f"{prefix}admin"
    server = pg_a.connstr("").rsplit(" dbname=", 1)[0]
    fields = dict(part.split("=", 1) for part in server.split())
    lake = tmp_path / "lake"

    def real(text: str) -> str:  # as test_lakehouse_doc.py, without a user: PGUSER says
        server_ = f"host={fields['host']} port={fields['port']}"
        text = text.replace("host=localhost", server_).replace("/tmp/lake", str(lake))
        text = text.replace("dbname=app", f"{server_} dbname={app}")
        text = text.replace("dbname=lakestate", f"{server_} dbname={state}")
        text = re.sub(r"\blakestate\b", state, text)
        return re.sub(r"(?<![\w./=])app\b", app, text)

    env = dict(os.environ, PGHOST=fields["host"], PGPORT=fields["port"], PGUSER="postgres")
    tools = [str(Path(sys.executable).parent), str(Path(find_pg_tool("psql")).parent)]
    env["PATH"] = os.pathsep.join([*tools, env.get("PATH", "")])
    as_admin = dict(env, PGUSER=admin)
    psql = "psql -X -q -v ON_ERROR_STOP=1"
    grants = [
        f"pgferry root.ini grants --provider --table public.orders --role-prefix {prefix}"
        f" | {psql} app",
        f"pgferry leaf.ini grants --subscriber --table public.orders --role-prefix {prefix}"
        f" | {psql} lakestate",
    ]
    python_blocks = []
    granted = False
    try:
        for match in BLOCK.finditer(lakehouse_section()):
            body = match["body"]
            if match["file"]:
                (tmp_path / match["file"]).write_text(real(body), encoding="utf-8")
                continue
            if match.group(1) == "python":
                python_blocks.append(real(body))
                continue
            for line in re.sub(r"\n\s+(?=\S)", " ", body).splitlines():
                if not line.strip():
                    continue
                if line.startswith("pgferry"):
                    if not granted:
                        for grant in grants:
                            _run(real(grant), tmp_path, env)
                        granted = True
                    _run(real(line), tmp_path, as_admin)
                else:
                    _run(real(line), tmp_path, env)
        read = subprocess.run(
            [sys.executable, "-c", python_blocks[0]], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert read.returncode == 0, read.stderr
        assert read.stdout.splitlines()[0].split()[-1] == "990", read.stdout
    finally:
        for ini in ("leaf.ini", "root.ini", "pgqd.ini"):
            if (tmp_path / ini).exists():
                subprocess.run(
                    [sys.executable, "-m", "pgferry", "-s", ini], cwd=tmp_path, env=as_admin,
                    capture_output=True, timeout=60,
                )  # fmt: skip
    base = pg_a.connstr("")
    assert sql(base, f"select rolsuper from pg_roles where rolname = '{admin}'") == [(False,)]
    for db in (app, state):
        owners = sql(
            f"{server} dbname={db}",
            "select distinct nspowner::regrole::text from pg_namespace where nspname in"
            " ('ferry_queue', 'ferry_node', 'ferry', 'ferry_copy')",
        )
        assert owners == [(admin,)], db
    owner = "select relowner::regrole::text from pg_class where oid = 'public.orders'::regclass"
    assert sql(f"{server} dbname={state}", owner) == [(admin,)]  # made by add-table --create
