"""Connect strings without a password in argv: ``@FILE``, ``env:NAME``, and libpq's own
``.pgpass``, against a role whose logins the server checks with scram-sha-256.

The test clusters trust every local login; ``password_role`` adds pg_hba lines, first of
all, that make one new role give its password on the test's own databases.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgferry.polling import wait_until
from pgferry.testing.cluster import LocalCluster
from tests.fixtures.fix_cli import one_error

_roles = itertools.count(1)


@dataclass
class PasswordRole:
    name: str
    password: str
    cluster: LocalCluster

    def connstr(self, dbname: str, *, password: bool = False) -> str:
        """Where ``dbname`` is, as this role (with its password when asked)."""
        text = f"host=127.0.0.1 port={self.cluster.port} user={self.name} dbname={dbname}"
        return text + (f" password={self.password}" if password else "")


def _sql(connstr: str, *statements: sql.Composable | str) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt)


def _dbname(connstr: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(connstr)["dbname"]


@pytest.fixture
def password_role(pg_a: LocalCluster, new_db_a, monkeypatch, tmp_path) -> Iterator:
    """``make(*dbnames)``: a superuser role that must log in with its password (scram) on
    those databases of cluster A; libpq finds no password anywhere unless a test gives one
    (``PGPASSFILE`` points at a file that does not exist, ``PGPASSWORD`` is unset)."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.delenv("PGSERVICE", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    hba = pg_a.datadir / "pg_hba.conf"
    before = hba.read_text()
    role = PasswordRole(f"ferry_pw_{os.getpid()}_{next(_roles)}", secrets.token_hex(12), pg_a)

    def make(*dbnames: str) -> PasswordRole:
        _sql(
            pg_a.connstr(),
            "set password_encryption = 'scram-sha-256'",
            sql.SQL("create role {} login superuser password {}").format(
                sql.Identifier(role.name), sql.Literal(role.password)
            ),
        )
        lines = "".join(f'host "{db}" "{role.name}" 127.0.0.1/32 scram-sha-256\n' for db in dbnames)
        hba.write_text(lines + before)
        _sql(pg_a.connstr(), "select pg_reload_conf()")
        # The postmaster reloads on its own time: wait until a login without one is refused.
        wait_until(
            lambda: not _can_login(role.connstr(dbnames[0])),
            timeout=30,
            what="pg_hba.conf to ask for a password",
        )
        return role

    yield make
    hba.write_text(before)  # the role stays: the session's cluster is thrown away whole
    _sql(pg_a.connstr(), "select pg_reload_conf()")


def _can_login(connstr: str) -> bool:
    try:
        psycopg.connect(connstr, connect_timeout=5).close()
    except psycopg.OperationalError:
        return False
    return True


def _pgpass(tmp_path: Path, role: PasswordRole) -> Path:
    path = tmp_path / "pgpass"
    path.write_text(f"127.0.0.1:{role.cluster.port}:*:{role.name}:{role.password}\n")
    path.chmod(0o600)  # libpq ignores a password file others can read
    return path


def _two_tables(src: str, dst: str) -> None:
    for connstr in (src, dst):
        _sql(
            connstr,
            'create table "Pay t" (id int primary key, v text)',
            """insert into "Pay t" select g, 'v' || g from generate_series(1, 50) g""",
        )
    _sql(dst, """update "Pay t" set v = 'changed' where id = 7""")


def test_diff_through_pgpass_with_connect_strings_from_files(
    new_db_a, password_role, cli, tmp_path, monkeypatch
) -> None:
    src, dst = new_db_a(None), new_db_a(None)
    _two_tables(src, dst)
    role = password_role(_dbname(src), _dbname(dst))
    src_file, dst_file = tmp_path / "src.conn", tmp_path / "dst.conn"
    src_file.write_text(role.connstr(_dbname(src)) + "\n")  # no password in either
    dst_file.write_text(role.connstr(_dbname(dst)))
    args = ["diff", f"@{src_file}", '"Pay t"', f"@{dst_file}", '"Pay t"']

    # No password anywhere: the server asks for one and the run says so in one line.
    line = one_error(cli(*args))
    assert "no password supplied" in line, line

    # The same command line, the password in a .pgpass file libpq reads.
    monkeypatch.setenv("PGPASSFILE", str(_pgpass(tmp_path, role)))
    res = cli(*args)
    assert res.code == 1, res.err  # they differ: the one changed row is found
    assert "! id=7\n    src: id=7, v=v7\n    dst: id=7, v=changed\n" in res.out, res.out
    assert role.password not in res.out + res.err

    # PGPASSWORD instead, the destination from the environment.
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    monkeypatch.setenv("PGPASSWORD", role.password)
    monkeypatch.setenv("FERRY_DST", role.connstr(_dbname(dst)))
    res = cli("diff", f"@{src_file}", '"Pay t"', "env:FERRY_DST", '"Pay t"')
    assert res.code == 1 and "! id=7\n" in res.out, res.err


def test_diff_with_the_password_in_the_environment(new_db_a, password_role, cli, monkeypatch):
    src, dst = new_db_a(None), new_db_a(None)
    _two_tables(src, dst)
    _sql(dst, """update "Pay t" set v = 'v7' where id = 7""")
    role = password_role(_dbname(src), _dbname(dst))
    monkeypatch.setenv("FERRY_SRC", role.connstr(_dbname(src), password=True))
    monkeypatch.setenv("FERRY_DST", role.connstr(_dbname(dst), password=True))
    res = cli("diff", "env:FERRY_SRC", '"Pay t"', "env:FERRY_DST", '"Pay t"')
    assert res.code == 0, res.err  # equal, read through the password role on both sides
    assert role.password not in res.out + res.err


def test_nodes_from_files_store_no_password(
    new_db_a, password_role, write_ini, cli, tmp_path, monkeypatch
) -> None:
    """create-root's PUBLIC_CONNSTR from the environment and create-leaf's --provider from
    a file, both with the password: the root is stored without it (members reach it
    through .pgpass), and the leaf connects to its provider with the file's password."""
    root_db, leaf_db = new_db_a(None), new_db_a(None)
    role = password_role(_dbname(root_db))
    monkeypatch.setenv("ROOT_PUBLIC", role.connstr(_dbname(root_db), password=True))
    monkeypatch.setenv("PGPASSFILE", str(_pgpass(tmp_path, role)))  # the public check's
    res = cli(write_ini("root", root_db), "create-root", "root", "env:ROOT_PUBLIC")
    assert res.code == 0, res.err
    assert "stored without its password" in res.err

    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))  # only the file's now
    provider = tmp_path / "provider.conn"
    provider.write_text(role.connstr(_dbname(root_db), password=True))
    res = cli(write_ini("leaf", leaf_db), "create-leaf", "leaf", f"--provider=@{provider}")
    assert res.code == 0, res.err
    for db in (root_db, leaf_db):
        with psycopg.connect(db) as conn:
            rows = dict(
                conn.execute("select node_name, node_location from ferry_node.node_location")
            )
        assert set(rows) == {"root", "leaf"}
        stored = psycopg.conninfo.conninfo_to_dict(rows["root"])
        assert stored == psycopg.conninfo.conninfo_to_dict(role.connstr(_dbname(root_db)))
        assert role.password not in "".join(rows.values())


def test_plain_public_connstr_with_a_password_is_stored_with_a_warning(
    db_a, write_ini, cli
) -> None:
    """As londiste3 does; the warning says where it goes and how to keep it out."""
    public = f"{db_a} password=not-needed-here"
    res = cli(write_ini("root", db_a), "create-root", "root", public)
    assert res.code == 0, res.err
    assert "password is stored in the node tables" in res.err
    with psycopg.connect(db_a) as conn:
        (stored,) = conn.execute("select node_location from ferry_node.node_location").fetchone()
    assert stored == public


@pytest.mark.parametrize(
    ("arg", "said"),
    [
        (
            "@/nonexistent/conn",
            "cannot read a connect string in /nonexistent/conn: No such file or directory",
        ),
        ("env:FERRY_UNSET_VARIABLE", "environment variable FERRY_UNSET_VARIABLE is not set"),
        ("env:", "environment variable (none) is not set"),
    ],
)
def test_unreadable_forms_fail_in_one_line(arg, said, cli, monkeypatch) -> None:
    monkeypatch.delenv("FERRY_UNSET_VARIABLE", raising=False)
    line = one_error(cli("diff", arg, "t", "host=127.0.0.1 dbname=x", "t"))
    assert line == f"pgferry: pgferry diff: SRC_CONNSTR: {said}"


def test_an_empty_file_fails_in_one_line(db_a, write_ini, cli, tmp_path) -> None:
    empty = tmp_path / "empty.conn"
    empty.write_text("\n")
    line = one_error(cli(write_ini("leaf", db_a), "create-leaf", "leaf", f"--provider=@{empty}"))
    assert line == f"pgferry: create-leaf: --provider: {empty} holds no connect string"
    with psycopg.connect(db_a) as conn:  # nothing made
        assert conn.execute("select to_regnamespace('ferry_node')").fetchone() == (None,)
