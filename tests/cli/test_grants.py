"""``grants``: the printed script, run by a superuser, gives each role what it needs and no more.

The script runs twice through psql on a fresh database (the second run changes nothing);
what the admin may then do is read back with PostgreSQL's own privilege functions.  The
README's first replication under these roles is ``tests/e2e/test_roles.py``.
"""

from __future__ import annotations

import subprocess
import uuid

import psycopg

from pgferry.testing.cluster import find_pg_tool
from tests.fixtures.fix_cli import one_error

TABLES = ("app.orders", '"Mixed Case"."Tab le"')
SETUP = (
    'create schema app; create schema "Mixed Case";'
    " create table app.orders (id serial primary key, v int);"
    ' create table "Mixed Case"."Tab le" (id int primary key)'
)


def _psql(connstr: str, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [find_pg_tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", connstr],
        input=script, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _one(connstr: str, query: str, params: tuple = ()) -> object:
    with psycopg.connect(connstr, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _script(cli, ini, *args: str) -> str:
    res = cli(ini, "grants", *args)
    assert res.code == 0, res.err
    statements = [line for line in res.out.splitlines() if not line.startswith("--")]
    assert not any("password" in line.lower() for line in statements)  # never set here
    return res.out


def test_a_provider_admin_may_read_and_capture_only(cli, write_ini, db_a: str) -> None:
    prefix = f"g{uuid.uuid4().hex[:8]}_"
    admin = f"{prefix}admin"
    ini = write_ini("root", db_a.replace("user=postgres", f"user={admin}"))
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute(SETUP)
    script = _script(
        cli, ini, "--provider", "--table", *TABLES, "--seq", "app.orders_id_seq",
        "--role-prefix", prefix,
    )  # fmt: skip
    for _ in range(2):  # again: nothing fails, nothing changes
        proc = _psql(db_a, script)
        assert proc.returncode == 0, proc.stderr
    assert _one(db_a, "select rolsuper or rolcreaterole or rolcreatedb or rolbypassrls"
                      " from pg_roles where rolname = %s", (admin,)) is False  # fmt: skip
    assert _one(db_a, "select has_database_privilege(%s, current_database(), 'CREATE')",
                (admin,)) is True  # fmt: skip
    for table in ("app.orders", '"Mixed Case"."Tab le"'):
        for right, expected in [
            ("SELECT", True),
            ("TRIGGER", True),
            ("INSERT", False),
            ("UPDATE", False),
            ("DELETE", False),
            ("TRUNCATE", False),
        ]:
            granted = _one(db_a, "select has_table_privilege(%s, %s, %s)", (admin, table, right))
            assert granted is expected, (table, right)
    assert _one(db_a, "select has_sequence_privilege(%s, 'app.orders_id_seq', 'SELECT')",
                (admin,)) is True  # fmt: skip
    assert _one(db_a, "select has_sequence_privilege(%s, 'app.orders_id_seq', 'UPDATE')",
                (admin,)) is False  # fmt: skip


def test_a_subscriber_admin_owns_its_tables(cli, write_ini, db_b: str) -> None:
    prefix = f"g{uuid.uuid4().hex[:8]}_"
    admin = f"{prefix}admin"
    ini = write_ini("leaf", db_b.replace("user=postgres", f"user={admin}"))
    with psycopg.connect(db_b, autocommit=True) as conn:
        conn.execute(SETUP)
    # later.t and its schema are not there yet: add-table --create makes them, the admin's.
    script = _script(
        cli, ini, "--subscriber", "--table", *TABLES, "later.t", "--seq", "app.orders_id_seq",
        "later.s", "--role-prefix", prefix,
    )  # fmt: skip
    for _ in range(2):
        proc = _psql(db_b, script)
        assert proc.returncode == 0, proc.stderr
    for table in ("app.orders", '"Mixed Case"."Tab le"'):
        owner = _one(db_b, "select relowner::regrole::text from pg_class where oid = %s::regclass",
                     (table,))  # fmt: skip
        assert owner == admin
    assert _one(db_b, "select has_parameter_privilege(%s, 'session_replication_role', 'SET')",
                (admin,)) is True  # fmt: skip
    assert _one(db_b, "select has_schema_privilege(%s, 'Mixed Case', 'CREATE')", (admin,)) is True
    assert _one(db_b, "select has_sequence_privilege(%s, 'app.orders_id_seq', 'UPDATE')",
                (admin,)) is True  # fmt: skip


def test_the_admin_is_the_user_of_the_db_connect_string(cli, write_ini) -> None:
    script = _script(cli, write_ini("root", "host=db1 dbname=app"))
    assert 'CREATE ROLE "ferry_admin" LOGIN;' in script  # none named: the prefix's
    script = _script(cli, write_ini("root", "host=db1 dbname=app user=ops"))
    assert 'CREATE ROLE "ops" LOGIN;' in script
    assert "ferry_provider" not in script and "ferry_subscriber" not in script  # not asked
    assert script.startswith("-- ") and script.rstrip().endswith("COMMIT;")


def test_bad_input_is_one_line(cli, write_ini) -> None:
    ini = write_ini("root", "host=db1 dbname=app")
    line = one_error(cli(ini, "grants", "--table", "app.t"))
    assert "--table and --seq go with --provider or --subscriber" in line
    line = one_error(cli(ini, "grants", "--provider", "--table", "a.b.c"))
    assert "expected schema.name" in line
    line = one_error(cli(ini, "grants", "--provider", "--table", "app.$pgferry$"))
    assert "a name may not hold $pgferry$" in line
    line = one_error(cli(ini, "grants", "--role-prefix", ""))
    assert "--role-prefix may not be empty" in line
