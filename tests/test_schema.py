"""Schema installation: versions made of several files, component requirements, ferry_copy."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import psycopg
import pytest

from pgferry import schema
from pgferry.db import connect

# SHA-256 of queue version 1 as released in one file (sql/queue/001_queue.sql, 1,075 lines).
# Its parts, each without the comment block that opens it, joined by one empty line, must
# give back exactly that text: same statements, same order, same function bodies.
QUEUE_V1_SHA256 = "959754db47606c0f42769d64c5f7ddeb8915e10d432554445ba51e692e26e7e9"

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


def without_opening_comment(text: str) -> str:
    """A part's text after the comment block that opens it and the empty line after that."""
    head, _, body = text.partition("\n\n")
    assert head and all(line.startswith("--") for line in head.splitlines()), head
    return body


def queue_v1() -> schema.Migration:
    first = schema.migrations("queue")[0]
    assert first.version == 1
    return first


def run_versions(connstr: str, component: str, upto: int) -> None:
    """Run a component's files up to version ``upto`` as the old installer did, recording it."""
    with psycopg.connect(connstr) as conn:
        conn.execute("create schema if not exists ferry_queue")
        conn.execute(
            "create table ferry_queue.schema_version (component text primary key,"
            " version integer not null, installed_at timestamptz not null default now())"
        )
        for migration in schema.migrations(component):
            if migration.version <= upto:
                for _, text in migration.scripts():
                    conn.execute(text)  # type: ignore[arg-type]
        conn.execute(
            "insert into ferry_queue.schema_version (component, version) values (%s, %s)",
            (component, upto),
        )


# --- versions made of several files ---------------------------------------------------------


def test_file_names_group_into_versions_in_part_order() -> None:
    names = ["002_b.sql", "001_10_z.sql", "001_2_y.sql", "001_1_x.sql", "003_2pc.sql", "x.sql"]
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


def test_every_shipped_version_parses() -> None:
    for name in (*schema.COMPONENTS, "copy"):
        found = schema.migrations(name)
        assert found and found[0].version == 1, name
        assert schema.latest_version(name) == found[-1].version


def test_queue_version_1_parts_are_the_released_file() -> None:
    first = queue_v1()
    assert len(first.files) > 1
    bodies = [without_opening_comment(text) for _, text in first.scripts()]
    for body in bodies:
        assert body.strip() and not body.startswith("\n") and body.endswith(";\n")
    released = "\n".join(bodies)
    assert len(released.splitlines()) == 1075
    assert hashlib.sha256(released.encode()).hexdigest() == QUEUE_V1_SHA256


def test_queue_version_1_parts_equal_one_script(new_db_a: Callable[[str | None], str]) -> None:
    """Running the parts one by one builds exactly what running them as one script does."""
    by_parts, as_one = new_db_a(None), new_db_a(None)
    with psycopg.connect(by_parts) as conn:
        for _, text in queue_v1().scripts():
            conn.execute(text)  # type: ignore[arg-type]
    script = "\n".join(without_opening_comment(text) for _, text in queue_v1().scripts())
    with psycopg.connect(as_one) as conn:
        conn.execute(script)  # type: ignore[arg-type]
    objects = catalog(by_parts, "ferry_queue")
    assert any(line.startswith("function ferry_queue.attach_capture(") for line in objects)
    assert objects == catalog(as_one, "ferry_queue")


def test_fresh_install_runs_every_file_in_order(db_a: str) -> None:
    with connect(db_a) as conn:
        applied = schema.install(conn, ("queue",))
        assert schema.installed_versions(conn) == {"queue": schema.latest_version("queue")}
    expected = [f"queue/{f}" for m in schema.migrations("queue") for f in m.files]
    assert applied == expected
    assert applied[: len(queue_v1().files)] == [f"queue/{f}" for f in queue_v1().files]


def test_a_database_at_version_1_gets_only_newer_files(
    new_db_a: Callable[[str | None], str],
) -> None:
    upgraded, fresh = new_db_a(None), new_db_a(None)
    run_versions(upgraded, "queue", 1)
    with connect(upgraded) as conn:
        applied = schema.install(conn, ("queue",))
        assert schema.installed_versions(conn) == {"queue": schema.latest_version("queue")}
        again = schema.install(conn, ("queue",))
    newer = [f"queue/{f}" for m in schema.migrations("queue") if m.version > 1 for f in m.files]
    assert applied == newer
    assert again == []
    with connect(fresh) as conn:
        schema.install(conn, ("queue",))
    assert catalog(upgraded, "ferry_queue") == catalog(fresh, "ferry_queue")


def test_capture_triggers_made_before_version_9_keep_working(db_a: str) -> None:
    """Version 9 rewrites the capture functions' bookkeeping: a trigger attached before it
    still queues, also after the next rotation."""
    run_versions(db_a, "queue", 8)
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute("select ferry_queue.create_queue('q')")
        conn.execute("select ferry_queue.set_queue_config('q', 'rotation_period', '0')")
        conn.execute("create table t (id int primary key)")
        conn.execute("select ferry_queue.attach_capture('q', 't')")
        conn.execute("insert into t values (1)")
        schema.install(conn, ("queue",))
        conn.execute("insert into t values (2)")
        conn.execute("select ferry_queue.maint_rotate_tables_step1('q')")
        conn.execute("insert into t values (3)")
        rows = conn.execute(
            "select ev_part % 10, ev_data from ferry_queue.event order by ev_id"
        ).fetchall()
    assert rows == [(0, '{"id":1}'), (0, '{"id":2}'), (1, '{"id":3}')]


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


def test_copy_installs_alone_and_once(db_a: str) -> None:
    # The copy job calls it on an autocommit connection.
    with connect(db_a, autocommit=True) as conn:
        first = schema.install(conn, ("copy",))
        again = schema.install(conn, ("copy",))
        versions = schema.installed_versions(conn)
    assert first == ["copy/001_copy.sql"]
    assert again == []
    assert versions == {"copy": 1}
    assert pgferry_schemas(db_a) == {"ferry_copy"}
    tables = {
        line.split()[1] for line in catalog(db_a, "ferry_copy") if line.startswith("relation ")
    }
    assert tables == {
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
        assert schema.install(conn, ("copy",)) == ["copy/001_copy.sql"]
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
        assert schema.install(conn, ("copy",)) == ["copy/001_copy.sql"]
        assert schema.installed_versions(conn) == {"copy": 1}
        assert schema.install(conn, ("copy",)) == []
        kept = conn.execute(
            "select (select count(*) from ferry_copy.range_done),"
            " (select count(*) from ferry_copy.saved_index)"
        ).fetchone()
    assert kept == (1, 1)
    with connect(fresh) as conn:
        schema.install(conn, ("copy",))
    assert catalog(old, "ferry_copy") == catalog(fresh, "ferry_copy")
