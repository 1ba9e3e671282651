"""DROP of a replicated table: refused on the root with capture-ddl on (remove-table first);
without it, ``compare`` names the table that is gone and compares the others."""

from __future__ import annotations

import psycopg
import pytest

from pgferry.testing.cascade import Cascade
from tests.scripts.test_ddl_capture import three  # noqa: F401 - the fixture

ODD = '"Odd Schema"."Tåb Le"'
ROWS = "select * from {} order by 1"


def _refused(c: Cascade, query: str) -> str:
    with (
        psycopg.connect(c.dsns["root"], autocommit=True) as conn,
        pytest.raises(psycopg.Error) as failure,
    ):
        conn.execute(query)
    return failure.value.diag.message_primary or ""


def _exists(c: Cascade, node: str, table: str) -> bool:
    return c.sql(node, "select to_regclass(%s) is not null", (table,)) == [(True,)]


def test_capture_ddl_refuses_dropping_a_registered_table(three: Cascade) -> None:  # noqa: F811
    c = three
    for node in ("root", "full"):
        c.sql(node, f'create schema "Odd Schema"; create table {ODD} (id int primary key, v text)')
    c.sql("root", f"insert into {ODD} values (1, 'a'), (2, 'b')")
    c.sql("root", "create table app.local_only (id int)")  # nobody replicates it
    c.add("root", ODD)
    c.add("full", ODD)
    c.catch_up("full", "part")
    # A role's objects, for DROP OWNED (its owner set before capture, which refuses OWNER TO).
    c.sql("root", "drop role if exists ddl_drop_owner; create role ddl_drop_owner")
    c.sql("root", "alter table public.plain owner to ddl_drop_owner")
    assert c.cli("root", "capture-ddl", "on").code == 0
    assert "missing" not in c.cli("root", "capture-ddl").out
    # A root whose capture was turned on before this trigger existed: status says so, and
    # capture-ddl on again makes it.
    c.sql("root", "drop event trigger _ferry_ddl_drop_table")
    assert "missing: _ferry_ddl_drop_table" in c.cli("root", "capture-ddl").out
    assert c.cli("root", "capture-ddl", "on").code == 0
    assert "missing" not in c.cli("root", "capture-ddl").out

    refusals = {
        "drop table app.t": "DROP TABLE would drop replicated table app.t (queue",
        f"drop table {ODD}": f"DROP TABLE would drop replicated table {ODD} (queue",
        # Reached by CASCADE: the schema's replicated tables are named, the rest not.
        "drop schema app cascade": "DROP SCHEMA would drop replicated table app.other, app.t",
        "drop table app.local_only, public.plain": "replicated table public.plain (queue",
        "drop owned by ddl_drop_owner": "DROP OWNED would drop replicated table public.plain",
    }
    for query, words in refusals.items():
        text = _refused(c, query)
        assert words in text and "run remove-table" in text, text
        assert "\n" not in text, text
    for table in ("app.t", "app.other", "app.local_only", "public.plain", ODD):
        assert _exists(c, "root", table), f"{table} dropped by a refused statement"

    # Replication goes on; a table nobody replicates drops as before.
    c.sql("root", "insert into app.t values (500, 'after'); drop table app.local_only")
    c.sql("root", f"insert into {ODD} values (3, 'c')")
    c.catch_up("full", "part")
    for table in ("app.t", ODD):
        assert c.sql("full", ROWS.format(table)) == c.sql("root", ROWS.format(table))

    # remove-table first, then the drop is the root's own business.
    assert c.cli("full", "remove-table", ODD).code == 0
    assert c.cli("root", "remove-table", ODD).code == 0
    c.sql("root", f"drop table {ODD}")
    assert not _exists(c, "root", ODD)
    assert c.cli("root", "capture-ddl", "off").code == 0
    c.sql("root", "drop table app.other")  # capture off: nothing refuses it any more
    assert not _exists(c, "root", "app.other")
    c.sql("root", "drop owned by ddl_drop_owner; drop role ddl_drop_owner")
    assert not _exists(c, "root", "public.plain")


def test_compare_names_a_dropped_table_and_compares_the_others(three: Cascade) -> None:  # noqa: F811
    c = three
    c.sql("root", "insert into app.other values (1, 'x'), (2, 'y')")
    c.sql("root", "insert into public.plain values (1, 'p')")
    c.catch_up("full", "part")
    # Capture off: no event trigger, nothing can refuse this.
    c.sql("root", "drop table app.other")
    c.sql("root", "insert into app.t values (501, 'after the drop')")
    c.catch_up("full", "part")
    for table in ("app.t", "public.plain"):
        assert c.sql("full", ROWS.format(table)) == c.sql("root", ROWS.format(table))

    with c.running("full", "part"):
        compared = c.cli("full", "compare")
        part = c.cli("part", "compare")
    out = compared.out.splitlines()
    assert compared.code == 1, compared.out + compared.err
    gone = "app.other: table app.other does not exist on node root: remove-table it or add it back"
    assert gone in out, compared.out + compared.err
    # The tables both nodes still have are compared, and are equal.
    for table in ("app.t", "public.plain"):
        assert any(line.startswith(f"{table}: srcdb: ") for line in out), compared.out
        assert f"{table}: Results do not match!" not in out
    assert [line for line in out if "app.other" in line] == [gone], compared.out
    assert "Traceback" not in compared.err
    # The partial leaf replicates app.t only: nothing is missing there.
    assert part.code == 0, part.out + part.err

    # A real difference on a table that is there is still found beside the missing one.
    c.sql("full", "set session_replication_role = replica; delete from app.t where id = 501")
    with c.running("full"):
        compared = c.cli("full", "compare")
    assert compared.code == 1 and "app.t: Results do not match!" in compared.out
    assert gone in compared.out.splitlines()

    # Dropped on the subscriber: its replay cannot go on either, so compare says which
    # table in one line before it waits for a sync point.
    c.sql("full", "drop table public.plain")
    compared = c.cli("full", "compare", "app.t")
    assert compared.code != 0
    assert compared.err.strip() == (
        "pgferry: table public.plain does not exist on node full: remove-table it or add it"
        " back (replay stops at it too)"
    ), compared.err
    assert c.cli("full", "remove-table", "public.plain").code == 0
    with c.running("full"):
        compared = c.cli("full", "compare", "app.t")
    assert "app.t: Results do not match!" in compared.out and "plain" not in compared.out
