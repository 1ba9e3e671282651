"""docs/upgrade.md's schema dump leaves pgferry out, and restores on a fresh database.

The ```` ```sh schema-dump ```` block of docs/upgrade.md runs as written (hosts replaced by
a root's database on cluster A and a fresh database on cluster B): the restored schema has
the tables, their own triggers and indexes, and none of pgferry's schemas or triggers.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from pgferry.testing.cluster import find_pg_tool
from pgferry.testing.scenario import sql

DOC = Path(__file__).resolve().parents[2] / "docs" / "upgrade.md"
SCHEMA = """
create schema app;
create table app.orders (id serial primary key, note text default 'x', at timestamptz);
create index orders_at on app.orders (at);
create function app.stamp() returns trigger language plpgsql as
  $$ begin new.at := now(); return new; end $$;
create trigger stamp before insert on app.orders for each row execute function app.stamp();
create table app.log (n bigint generated always as identity primary key, what text);
"""


def dump_lines() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"^```sh schema-dump\n(.*?)^```\n", text, re.M | re.S)
    assert found, "docs/upgrade.md has no ```sh schema-dump block"
    return [line for line in found[1].splitlines() if line.strip()]


def test_schema_dump_without_pgferry_restores(db_a, new_db_b, write_ini, cli, tmp_path):
    sql(db_a, SCHEMA)
    root = write_ini("old", db_a)
    assert cli(root, "create-root", "old").code == 0
    assert cli(root, "add-table", "app.orders", "app.log").code == 0
    assert sql(db_a, "select count(*) from pg_trigger where tgname like '\\_ferry\\_%'")[0][0] > 0
    new = new_db_b(None)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(find_pg_tool("pg_dump")).parent), env["PATH"]])
    for line in dump_lines():
        line = line.replace("host=old dbname=app", db_a).replace("host=new dbname=app", new)
        proc = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, (line, proc.stderr)
    assert sql(new, "select count(*) from pg_namespace where nspname like 'ferry%'") == [(0,)]
    triggers = sql(new, "select tgname from pg_trigger where not tgisinternal order by 1")
    assert triggers == [("stamp",)]
    assert sql(new, "select to_regclass('app.orders_at') is not null") == [(True,)]
    sql(new, "insert into app.orders (note) values ('y')")
    assert sql(new, "select id, note, at is not null from app.orders") == [(1, "y", True)]
    # What the filter is for: the plain dump carries the capture triggers and fails.
    plain = new_db_b(None)
    proc = subprocess.run(
        ["bash", "-c", f"pg_dump -s --exclude-schema='ferry*' '{db_a}' |"
                       f" psql -X -q -v ON_ERROR_STOP=1 '{plain}'"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0 and 'schema "ferry_queue" does not exist' in proc.stderr
