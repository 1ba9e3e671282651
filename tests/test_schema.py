"""Schema installation: table versions and function files, refused layouts, component
requirements, ferry_copy.  (Upgrades from every released version: tests/versions/.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from pgferry import schema
from pgferry.db import connect

# The bookkeeping that copies created before ferry_copy was a versioned component.
UNVERSIONED_COPY_SQL = """
create schema if not exists ferry_copy;
create table if not exists ferry_copy.range_done (
    copy_id     text    not null,
    dest_table  text    not null,
    range_no    integer not null,
    rows        bigint  not null default 0,
    done_at     timestamptz not null default now(),
    primary key (copy_id, dest_table, range_no)
);
create table if not exists ferry_copy.saved_index (
    dest_table  text not null,
    index_name  text not null,
    index_def   text not null,
    saved_at    timestamptz not null default now(),
    primary key (dest_table, index_name)
);
"""

# Every object of one schema as text, without oids (internal FK triggers are named after
# oids; the constraints they implement are compared instead).
_CATALOG_SQL = """
select 'function ' || p.oid::regprocedure::text || E'\\n' || pg_get_functiondef(p.oid)
  from pg_proc p where p.pronamespace = %(ns)s::regnamespace
union all
select 'relation ' || c.relname || ' ' || c.relkind::text || ' '
       || coalesce(pg_get_expr(c.relpartbound, c.oid), '') || ' '
       || coalesce(array_to_string(c.reloptions, ','), '')
  from pg_class c where c.relnamespace = %(ns)s::regnamespace
union all
select 'column ' || c.relname || '.' || a.attname || ' ' || a.attnum || ' '
       || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' '
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
  from pg_attribute a
  join pg_class c on c.oid = a.attrelid
  left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
 where c.relnamespace = %(ns)s::regnamespace and a.attnum > 0 and not a.attisdropped
union all
select 'constraint ' || k.conrelid::regclass::text || ' ' || k.conname || ' '
       || pg_get_constraintdef(k.oid)
  from pg_constraint k where k.connamespace = %(ns)s::regnamespace
union all
select 'index ' || pg_get_indexdef(i.indexrelid)
  from pg_index i join pg_class c on c.oid = i.indexrelid
 where c.relnamespace = %(ns)s::regnamespace
union all
select 'trigger ' || pg_get_triggerdef(t.oid)
  from pg_trigger t join pg_class c on c.oid = t.tgrelid
 where c.relnamespace = %(ns)s::regnamespace and not t.tgisinternal
union all
select 'sequence ' || s.seqrelid::regclass::text || ' ' || s.seqtypid::regtype::text || ' '
       || s.seqstart || ' ' || s.seqincrement || ' ' || s.seqmax || ' ' || s.seqmin || ' '
       || s.seqcache || ' ' || s.seqcycle::text
  from pg_sequence s join pg_class c on c.oid = s.seqrelid
 where c.relnamespace = %(ns)s::regnamespace
union all
select 'type ' || t.typname || ' ' || t.typtype::text
  from pg_type t where t.typnamespace = %(ns)s::regnamespace
order by 1
"""


def catalog(connstr: str, namespace: str) -> list[str]:
    with psycopg.connect(connstr) as conn:
        return [row[0] for row in conn.execute(_CATALOG_SQL, {"ns": namespace})]


def pgferry_schemas(connstr: str) -> set[str]:
    with psycopg.connect(connstr) as conn:
        rows = conn.execute("select nspname from pg_namespace where nspname like 'ferry%'")
        return {row[0] for row in rows}


def run_versions(connstr: str, component: str, upto: int) -> None:
    """Bring a database to version ``upto`` of a component as an install then would have:
    its table versions up to there, its function files, the version recorded."""
    with connect(connstr) as conn:
        conn.execute("create schema if not exists ferry_queue")
        conn.execute(
            "create table ferry_queue.schema_version (component text primary key,"
            " version integer not null, installed_at timestamptz not null default now(),"
            " functions_digest text)"
        )
        for migration in schema.migrations(component):
            if migration.version <= upto:
                for _, text in migration.scripts():
                    conn.execute(text)  # type: ignore[arg-type]
        conn.execute("set check_function_bodies = off")
        for _, text in schema.functions(component):
            conn.execute(text)  # type: ignore[arg-type]
        conn.execute(
            "insert into ferry_queue.schema_version (component, version, functions_digest)"
            " values (%s, %s, %s)",
            (component, upto, schema.functions_digest(component)),
        )


def table_files(component: str, above: int = 0) -> list[str]:
    return [
        f"{component}/tables/{f}"
        for m in schema.migrations(component)
        if m.version > above
        for f in m.files
    ]


def functions_item(component: str) -> str:
    return f"{component}/functions/ ({len(schema.functions(component))} files)"


def layout(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# --- versions and function files -----------------------------------------------------------


def test_file_names_group_into_versions_in_part_order() -> None:
    names = ["002_b.sql", "001_10_z.sql", "001_2_y.sql", "001_1_x.sql", "003_2pc.sql"]
    found = schema.group_versions("queue", names)
    assert [(m.version, m.files) for m in found] == [
        (1, ("001_1_x.sql", "001_2_y.sql", "001_10_z.sql")),
        (2, ("002_b.sql",)),
        (3, ("003_2pc.sql",)),
    ]


@pytest.mark.parametrize(
    "names",
    [["001_a.sql", "001_b.sql"], ["001_a.sql", "001_1_b.sql"], ["001_1_a.sql", "001_1_b.sql"]],
)
def test_a_version_is_one_file_or_distinct_parts(names: list[str]) -> None:
    with pytest.raises(ValueError, match="version 1"):
        schema.group_versions("queue", names)


def test_a_table_file_without_a_version_is_refused() -> None:
    with pytest.raises(ValueError, match="sql/queue/tables/x.sql: a version is NNN"):
        schema.group_versions("queue", ["001_a.sql", "x.sql"])


def test_every_shipped_version_parses() -> None:
    for name in (*schema.COMPONENTS, "copy"):
        found = schema.migrations(name)
        assert found and found[0].version == 1, name
        assert schema.latest_version(name) == found[-1].version
    for name in schema.COMPONENTS:
        assert schema.functions(name), name
    assert schema.functions("copy") == []


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"ferry/100_ddl.sql": "select 1;"}, "sql/ferry/100_ddl.sql: SQL files belong in"),
        ({"ferry/functions/f.sql": "select 1;"}, "a function file is ferry.<name>.sql"),
        ({"ferry/functions/ferry_queue.f.sql": "select 1;"}, "a function file is ferry.<name>"),
        (
            {"ferry/functions/ferry.f.sql": "create function ferry.f() returns int"},
            "write CREATE OR REPLACE",
        ),
    ],
)
def test_a_malformed_layout_is_refused_before_anything_runs(
    db_a: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str], message: str
) -> None:
    layout(tmp_path, {"queue/tables/001_q.sql": "create schema ferry_queue;", **files})
    monkeypatch.setattr(schema, "_folder", lambda name, *sub: tmp_path.joinpath(name, *sub))
    with connect(db_a) as conn, pytest.raises(ValueError, match=message):
        schema.install(conn, ("queue", "ferry"))
    assert pgferry_schemas(db_a) == set()


def test_fresh_install_runs_every_version_then_the_functions(db_a: str) -> None:
    with connect(db_a) as conn:
        applied = schema.install(conn, ("queue",))
        assert schema.installed_versions(conn) == {"queue": schema.latest_version("queue")}
        again = schema.install(conn, ("queue",))
    assert applied == [*table_files("queue"), functions_item("queue")]
    assert again == []


def test_a_database_at_version_1_gets_only_newer_versions(
    new_db_a: Callable[[str | None], str],
) -> None:
    upgraded, fresh = new_db_a(None), new_db_a(None)
    run_versions(upgraded, "queue", 1)
    with connect(upgraded) as conn:
        applied = schema.install(conn, ("queue",))
        assert schema.installed_versions(conn) == {"queue": schema.latest_version("queue")}
        again = schema.install(conn, ("queue",))
    assert applied == [*table_files("queue", above=1), functions_item("queue")]
    assert again == []
    with connect(fresh) as conn:
        schema.install(conn, ("queue",))
    assert catalog(upgraded, "ferry_queue") == catalog(fresh, "ferry_queue")


def test_changed_function_files_are_applied_without_a_new_version(db_a: str) -> None:
    with connect(db_a) as conn:
        schema.install(conn, ("ferry",))
        conn.execute("create or replace function ferry_queue.version() returns text"
                     " language sql immutable as $$ select 'edited' $$")  # fmt: skip
        # As if the files had changed since: their digest is not the one recorded.
        conn.execute("update ferry_queue.schema_version set functions_digest = 'before'"
                     " where component = 'queue'")  # fmt: skip
        applied = schema.install(conn, ("ferry",))
        version = conn.execute("select ferry_queue.version()").fetchone()
    assert applied == [functions_item("queue")]
    assert version == ("1.0",)


# --- components and their requirements ------------------------------------------------------


def test_requirements_come_first() -> None:
    assert schema.install_order(("ferry",)) == ["queue", "node", "ferry"]
    assert schema.install_order(("node", "queue")) == ["queue", "node"]
    assert schema.install_order(("copy",)) == ["copy"]
    assert schema.install_order(("copy", "ferry")) == ["copy", "queue", "node", "ferry"]
    with pytest.raises(ValueError, match="unknown schema component"):
        schema.install_order(("nope",))


def test_a_node_install_leaves_out_ferry_copy(db_a: str) -> None:
    with connect(db_a) as conn:
        schema.install(conn, ("ferry",))
        assert "copy" not in schema.installed_versions(conn)
    assert pgferry_schemas(db_a) == {"ferry_queue", "ferry_node", "ferry"}


# --- ferry_copy -----------------------------------------------------------------------------


COPY_FILES = [
    "copy/tables/001_copy.sql",
    "copy/tables/110_chunks.sql",
    "copy/tables/120_saved_keys.sql",
]


def test_copy_installs_alone_and_once(db_a: str) -> None:
    # The copy job calls it on an autocommit connection.
    with connect(db_a, autocommit=True) as conn:
        first = schema.install(conn, ("copy",))
        again = schema.install(conn, ("copy",))
        versions = schema.installed_versions(conn)
    assert first == COPY_FILES
    assert again == []
    assert versions == {"copy": 120}
    assert pgferry_schemas(db_a) == {"ferry_copy"}
    tables = {
        line.split()[1] for line in catalog(db_a, "ferry_copy") if line.startswith("relation ")
    }
    assert tables == {
        "chunk",
        "chunk_pkey",
        "range_done",
        "range_done_pkey",
        "saved_index",
        "saved_index_pkey",
        "schema_version",
        "schema_version_pkey",
    }


def test_copy_and_node_components_share_a_database(db_a: str) -> None:
    with connect(db_a) as conn:
        schema.install(conn, ("ferry",))
        assert schema.install(conn, ("copy",)) == COPY_FILES
        assert schema.install(conn, ("ferry", "copy")) == []
        versions = schema.installed_versions(conn)
    expected = {name: schema.latest_version(name) for name in ("queue", "node", "ferry", "copy")}
    assert versions == expected


def test_unversioned_copy_bookkeeping_upgrades(new_db_a: Callable[[str | None], str]) -> None:
    old, fresh = new_db_a(None), new_db_a(None)
    with psycopg.connect(old) as conn:
        conn.execute(UNVERSIONED_COPY_SQL)
        conn.execute(
            "insert into ferry_copy.range_done (copy_id, dest_table, range_no) values ('c', 't', 1)"
        )
        conn.execute(
            "insert into ferry_copy.saved_index (dest_table, index_name, index_def)"
            " values ('t', 'i', 'create index i on t (a)')"
        )
    with connect(old) as conn:
        assert schema.installed_versions(conn) == {}
        assert schema.install(conn, ("copy",)) == COPY_FILES
        assert schema.installed_versions(conn) == {"copy": 120}
        assert schema.install(conn, ("copy",)) == []
        kept = conn.execute(
            "select (select count(*) from ferry_copy.range_done),"
            " (select count(*) from ferry_copy.saved_index)"
        ).fetchone()
    assert kept == (1, 1)
    with connect(fresh) as conn:
        schema.install(conn, ("copy",))
    assert catalog(old, "ferry_copy") == catalog(fresh, "ferry_copy")
