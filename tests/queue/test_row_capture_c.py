"""The plain row capture in C (ferry_queue.plain_row_capture, ext/pgferry_capture): the same
events as the PL/pgSQL plain function for the same statements, the table it keeps through a
transaction across a rotation, and PL/pgSQL where the C function cannot be made or used.

Each test that needs the library skips, saying why, on a server without it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql
from queue_helpers import install_queue, take_batch, tick

from pgferry import schema
from pgferry.node import capture
from pgferry.registry.capture_spec import CaptureSpec

C_FUNCTION = "plain_row_capture"

SETUP = """
create schema "Sch ü";
create table "Sch ü"."Tab le" (
    "Id" int, k2 text, "väl" text, n numeric, j jsonb, big text, ts timestamptz,
    primary key ("Id", k2));
create table public.parts (id int primary key, v text, w int) partition by range (id);
create table public.parts_1 partition of public.parts for values from (0) to (100);
-- A partition whose columns are in another order, and a dropped column.
create table public.parts_2 (w int, gone int, v text, id int not null);
alter table public.parts_2 drop column gone;
alter table public.parts attach partition public.parts_2 for values from (100) to (200);
create table public."MiXed Tab" ("Ké y" text primary key, v int);
"""
TABLES = ('"Sch ü"."Tab le"', "public.parts", 'public."MiXed Tab"')

# Inserts, updates with and without a key change (a long compressed key and a toasted value
# left as they were, a value that moves a row between partitions), deletes, NULLs, unicode,
# a rolled back savepoint.
STATEMENTS = (
    """insert into "Sch ü"."Tab le" values
       (1, 'a', 'ä€😀 "quoted" \\ back', 1.50, '{"b": [1, null], "a": "ü"}',
        repeat('x', 100000), '2024-02-29 12:00:00+00'),
       (2, 'b', null, null, null, null, null),
       (3, repeat('k', 5000), 'long key', -0.0, 'null', null, 'infinity')""",
    """update "Sch ü"."Tab le" set "väl" = 'y' where "Id" = 1""",
    """update "Sch ü"."Tab le" set k2 = 'c' where "Id" = 2""",
    """update "Sch ü"."Tab le" set "Id" = "Id", "väl" = 'same key' where "Id" in (1, 3)""",
    """update "Sch ü"."Tab le" set n = n where "Id" = 3""",
    """delete from "Sch ü"."Tab le" where "Id" = 2""",
    "insert into public.parts values (5, 'p1', 1), (150, 'p2', null)",
    "update public.parts set id = 160 where id = 5",
    "update public.parts set v = 'q' where id = 150",
    "delete from public.parts where id = 160",
    """insert into public."MiXed Tab" values ('ß', 1), ('Σ', null)""",
    """update public."MiXed Tab" set "Ké y" = 'σ' where "Ké y" = 'Σ'""",
    """begin;
       insert into public."MiXed Tab" values ('kept', 1);
       savepoint s;
       insert into public."MiXed Tab" values ('rolled back', 2);
       rollback to savepoint s;
       insert into public."MiXed Tab" values ('after', 3);
       commit""",
    """delete from public."MiXed Tab" """,
)


def c_or_skip(conn: psycopg.Connection) -> None:
    """Skip unless this database has the C function (the schema install made it)."""
    row = conn.execute("select ferry_queue.install_row_capture()").fetchone()
    assert row is not None
    if row[0] != "C":
        pytest.skip(f"no plain row capture in C here: {row[0]} (make capture-c)")


def capture_functions(conn: psycopg.Connection) -> dict[str, str]:
    """The row capture function of each table captured, by table."""
    rows = conn.execute(
        "select t.tgrelid::regclass::text, p.proname from pg_trigger t"
        " join pg_proc p on p.oid = t.tgfoid where t.tgname = '_ferry_q_capture'"
    ).fetchall()
    return dict(rows)


def queued(conn: psycopg.Connection) -> list[tuple[str, str, str]]:
    return conn.execute(
        "select ev_type, ev_data, ev_extra1 from ferry_queue.event order by ev_id"
    ).fetchall()


def captured(connstr: str, *, in_c: bool) -> list[tuple[str, str, str]]:
    """The events STATEMENTS queue in a fresh database, captured in C or in PL/pgSQL."""
    with psycopg.connect(connstr, autocommit=True) as conn:
        schema.install(conn, ("queue",))
        c_or_skip(conn)
        conn.execute("select ferry_queue.create_queue('q')")
        conn.execute(SETUP)  # type: ignore[arg-type]
        with conn.transaction():
            if not in_c:
                conn.execute("set local ferry_queue.row_capture = 'plpgsql'")
            for table in TABLES:
                conn.execute("select ferry_queue.attach_capture('q', %s)", (table,))
        functions = capture_functions(conn)
        assert len(functions) == len(TABLES) + 2  # the partitions' clones of the trigger
        assert all((fn == C_FUNCTION) == in_c for fn in functions.values()), functions
        for statement in STATEMENTS:
            conn.execute(statement)  # type: ignore[arg-type]
        # The events' index entries are there, every one (the C function writes them
        # itself): amcheck finds each heap row in the index, and an index scan all rows.
        conn.execute("create extension if not exists amcheck")
        checked = conn.execute(
            "select count(bt_index_check(i.indexrelid, true)) from pg_index i"
            " where i.indrelid = 'ferry_queue.event_1_0'::regclass"
        ).fetchone()
        assert checked == (1,)
        with conn.transaction():
            conn.execute("set local enable_seqscan = off")
            conn.execute("set local enable_bitmapscan = off")
            by_index = conn.execute(
                "select count(*) from ferry_queue.event_1_0 where ev_txid > '0'::xid8"
            ).fetchone()
        events = queued(conn)
        assert by_index == (len(events),)
        return events


def test_c_queues_the_events_plpgsql_queues(new_db_a: Callable[[str | None], str]) -> None:
    in_c = captured(new_db_a(None), in_c=True)
    in_plpgsql = captured(new_db_a(None), in_c=False)
    assert in_c == in_plpgsql
    # What both queued, in part: a key change is a D of the old row then an I of the new,
    # an unchanged key (a long one too) an U; a partition's rows name the parent, in the
    # partition's own column order; the rolled back savepoint queued nothing.
    types = [(t, table) for t, _, table in in_c]
    assert types[:8] == [
        ('I:"Id",k2', '"Sch ü"."Tab le"'),
        ('I:"Id",k2', '"Sch ü"."Tab le"'),
        ('I:"Id",k2', '"Sch ü"."Tab le"'),
        ('U:"Id",k2', '"Sch ü"."Tab le"'),
        ('D:"Id",k2', '"Sch ü"."Tab le"'),
        ('I:"Id",k2', '"Sch ü"."Tab le"'),
        ('U:"Id",k2', '"Sch ü"."Tab le"'),
        ('U:"Id",k2', '"Sch ü"."Tab le"'),
    ]
    parts = [(t, data) for t, data, table in in_c if table == "public.parts"]
    assert parts == [
        ("I:id", '{"id":5,"v":"p1","w":1}'),
        ("I:id", '{"w":null,"v":"p2","id":150}'),
        ("D:id", '{"id":5,"v":"p1","w":1}'),
        ("I:id", '{"w":1,"v":"p1","id":160}'),
        ("U:id", '{"w":null,"v":"q","id":150}'),
        ("D:id", '{"w":1,"v":"p1","id":160}'),
    ]
    mixed = [(t, data) for t, data, table in in_c if table == 'public."MiXed Tab"']
    assert [t[0] for t, _ in mixed] == ["I", "I", "D", "I", "I", "I", "D", "D", "D", "D"]
    assert {t for t, _ in mixed} == {'I:"Ké y"', 'D:"Ké y"'}
    assert '{"Ké y":"kept","v":1}' in [data for _, data in mixed]
    assert not any("rolled back" in data for _, data in mixed)
    assert in_c[0][1].startswith('{"Id":1,"k2":"a","väl":"ä€😀 \\"quoted\\" \\\\ back","n":1.50,')


def test_a_transaction_keeps_its_table_across_a_rotation(
    qconn: psycopg.Connection, qdb: str
) -> None:
    """A transaction writes the event table it found at its first event; one started after
    the rotation writes the new one; a consumer gets every event, in order."""
    c_or_skip(qconn)
    qconn.execute("select ferry_queue.create_queue('q')")
    qconn.execute("select ferry_queue.set_queue_config('q', 'rotation_period', '0')")
    qconn.execute("create table t (id int primary key)")
    qconn.execute("select ferry_queue.attach_capture('q', 't')")
    assert capture_functions(qconn) == {"t": C_FUNCTION}
    with psycopg.connect(qdb) as writer:
        writer.execute("insert into t values (1)")
        # No consumer yet: nothing holds the rotation back.
        qconn.execute("select ferry_queue.maint_rotate_tables_step1('q')")
        qconn.execute("select ferry_queue.maint_rotate_tables_step2()")
        assert qconn.execute("select queue_cur_table from ferry_queue.queue").fetchone() == (1,)
        qconn.execute("select ferry_queue.register_consumer('q', 'c')")
        writer.execute("insert into t values (2)")
        writer.commit()
    qconn.execute("insert into t values (3)")
    parts = qconn.execute("select ev_part % 10, ev_data from ferry_queue.event order by ev_id")
    assert parts.fetchall() == [(0, '{"id":1}'), (0, '{"id":2}'), (1, '{"id":3}')]
    tick(qconn, "q")
    batch = take_batch(qconn, "q", "c") or []
    assert [e[5] for e in batch] == ['{"id":1}', '{"id":2}', '{"id":3}']


@pytest.fixture
def admin(db_a: str) -> Iterator[str]:
    """A login role without superuser that owns database ``db_a``'s public schema and may
    create schemas in it; dropped at the end."""
    name = f"admin_{uuid.uuid4().hex[:8]}"
    role = sql.Identifier(name)
    dbname = psycopg.conninfo.conninfo_to_dict(db_a)["dbname"]
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute(sql.SQL("create role {} login").format(role))
        conn.execute(
            sql.SQL("grant create on database {} to {}; alter schema public owner to {}").format(
                sql.Identifier(str(dbname)), role, role
            )
        )
    yield name
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute("alter schema public owner to pg_database_owner")
        # The C function a superuser made in the role's schema goes with it.
        conn.execute(sql.SQL("drop owned by {} cascade; drop role {}").format(role, role))


def test_without_a_superuser_capture_runs_in_plpgsql(
    db_a: str, admin: str, new_db_a: Callable[[str | None], str]
) -> None:
    """An install by a role that is not a superuser makes no C function, and its tables
    are captured in PL/pgSQL; after a superuser made the function, that role may still not
    attach it (no EXECUTE), while the superuser's attach uses it."""
    with psycopg.connect(install_queue(new_db_a(None)), autocommit=True) as elsewhere:
        c_or_skip(elsewhere)  # a superuser's install elsewhere in the cluster makes it
    as_admin = db_a.replace("user=postgres", f"user={admin}")
    with psycopg.connect(as_admin, autocommit=True) as conn:
        schema.install(conn, ("queue",))
        made = conn.execute("select ferry_queue.install_row_capture()").fetchone()
        assert made == ("PL/pgSQL: the C function needs a superuser to install it",)
        assert conn.execute("select to_regprocedure('ferry_queue.plain_row_capture()')")\
            .fetchone() == (None,)  # fmt: skip
        conn.execute("select ferry_queue.create_queue('q')")
        conn.execute("create table public.t (id int primary key)")
        conn.execute("create table public.u (id int primary key)")
        conn.execute("select ferry_queue.attach_capture('q', 'public.t')")
        conn.execute("insert into public.t values (1)")
    with psycopg.connect(db_a, autocommit=True) as su:
        assert su.execute("select ferry_queue.install_row_capture()").fetchone() == ("C",)
    with psycopg.connect(as_admin, autocommit=True) as conn:
        conn.execute("select ferry_queue.attach_capture('q', 'public.u')")
        conn.execute("insert into public.u values (2)")
    with psycopg.connect(db_a, autocommit=True) as su:
        assert capture_functions(su) == {"t": "capture_1_1", "u": "capture_1_1"}
        su.execute("select ferry_queue.attach_capture('q', 'public.u')")
        su.execute("insert into public.u values (3)")
        assert capture_functions(su) == {"t": "capture_1_1", "u": C_FUNCTION}
        assert queued(su) == [
            ("I:id", '{"id":1}', "public.t"),
            ("I:id", '{"id":2}', "public.u"),
            ("I:id", '{"id":3}', "public.u"),
        ]


def test_an_event_table_of_another_shape_gets_the_kept_insert(qconn: psycopg.Connection) -> None:
    """The C function writes events itself only into an event table of the shape it knows;
    one that changed (here a trigger on it, which only an INSERT fires) gets its events by
    the kept INSERT, and back again once it has its shape, in the same session."""
    c_or_skip(qconn)
    qconn.execute("select ferry_queue.create_queue('q')")
    qconn.execute("create table t (id int primary key)")
    qconn.execute("select ferry_queue.attach_capture('q', 't')")
    qconn.execute(
        "create function public.mark() returns trigger language plpgsql as"
        " $$ begin new.ev_extra4 := 'by insert'; return new; end $$"
    )
    qconn.execute("insert into t values (1)")
    qconn.execute(
        "create trigger mark before insert on ferry_queue.event_1_0"
        " for each row execute function public.mark()"
    )
    qconn.execute("insert into t values (2)")
    qconn.execute("drop trigger mark on ferry_queue.event_1_0")
    qconn.execute("insert into t values (3)")
    rows = qconn.execute(
        "select ev_type, ev_data, ev_extra1, ev_extra4 from ferry_queue.event order by ev_id"
    ).fetchall()
    assert rows == [
        ("I:id", '{"id":1}', "public.t", None),
        ("I:id", '{"id":2}', "public.t", "by insert"),
        ("I:id", '{"id":3}', "public.t", None),
    ]


def test_attach_says_which_function_captures(
    qconn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """Each attach logs the function that captures the table, C or PL/pgSQL."""
    c_or_skip(qconn)
    qconn.execute("select ferry_queue.create_queue('q')")
    qconn.execute("create table public.t (id int primary key)")
    qconn.execute('create table public."U u" (id int primary key)')
    with caplog.at_level(logging.INFO, logger="pgferry.node.capture"):
        capture.attach(qconn, "q", "public.t", deny=False, spec=CaptureSpec())
        qconn.execute("set ferry_queue.row_capture = 'plpgsql'")
        capture.attach(qconn, "q", 'public."U u"', deny=False, spec=CaptureSpec())
    assert caplog.messages == [
        "Table public.t: captured by ferry_queue.plain_row_capture (C)",
        'Table public."U u": captured by ferry_queue.capture_1_1 (PL/pgSQL)',
    ]
