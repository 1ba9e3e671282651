"""The queue is a trust boundary: a writer of a replicated table needs only its table
privileges, and no role but the queue's owner puts an event into a queue any other way.

Capture runs with its owner's rights (SECURITY DEFINER, search_path pinned), its functions
and every other function of pgferry's schemas are closed to PUBLIC, and a capture function
queues only rows of the table its events name.  Roles are cluster-wide: each test makes its
own, with a unique name, and drops it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from pgferry import schema
from pgferry.node import tableops

SCHEMAS = ("ferry_queue", "ferry_node", "ferry")


@pytest.fixture
def make_role(pair) -> Iterator:
    """``make_role(prefix)``: a login role of the root's cluster, dropped at the end."""
    made: list[str] = []

    def make(prefix: str) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        pair.root(sql.SQL("create role {} login").format(sql.Identifier(name)))
        made.append(name)
        return name

    yield make
    for name in made:
        role = sql.Identifier(name)
        pair.root(sql.SQL("drop owned by {}; drop role {}").format(role, role))


def as_role(pair, role: str) -> psycopg.Connection:
    """An autocommit connection to the root logged in as ``role``."""
    return psycopg.connect(pair.root_dsn.replace("user=postgres", f"user={role}"), autocommit=True)


def grant_table(pair, table: str, role: str, privileges: str) -> None:
    pair.root(
        sql.SQL("grant {} on {} to {}").format(
            sql.SQL(privileges), sql.Identifier(*table.split(".")), sql.Identifier(role)
        )
    )


def root_add(pair, table: str, *args: str) -> None:
    options = tableops.AddTableOptions(trigger_args=args)
    with psycopg.connect(pair.root_dsn) as conn:
        tableops.add_tables(pair.root_cfg, conn, [table], options)


def events(pair) -> list[tuple]:
    return pair.root("select ev_type, ev_extra1 from ferry_queue.event order by ev_id")


def refused(conn: psycopg.Connection, query, params=None) -> str:
    """The SQLSTATE of ``query`` run by ``conn``, which must fail."""
    with pytest.raises(psycopg.Error) as failure:
        conn.execute(query, params)
    return failure.value.sqlstate or ""


def test_a_writer_needs_only_its_table_privileges(pair, make_role) -> None:
    """A role with INSERT, UPDATE and DELETE on two replicated tables of the root (one
    captured plainly, one with options, so through a generated template) and no grant on any
    ferry schema writes them; every change arrives on the leaf."""
    for node in (pair.root, pair.leaf):
        node("create schema app")
        node("create table app.plain (id int primary key, v text, hits int)")
        node('create table app."Opt Ions" (id int primary key, v text, hits int)')
    root_add(pair, "app.plain")
    root_add(pair, 'app."Opt Ions"', "ignore=hits")
    pair.cascade.add("leafnode", "app.plain", 'app."Opt Ions"')
    pair.catch_up()
    writer = make_role("writer")
    pair.root(sql.SQL("grant usage on schema app to {}").format(sql.Identifier(writer)))
    for table in ("app.plain", "app.Opt Ions"):
        grant_table(pair, table, writer, "insert, update, delete")
    # Statements that read no column: without SELECT, a WHERE clause would be refused.
    with as_role(pair, writer) as conn:
        for table in ("app.plain", 'app."Opt Ions"'):
            conn.execute(f"insert into {table} select g, 'v' || g, g from generate_series(1, 20) g")  # type: ignore[arg-type]
            conn.execute(f"update {table} set v = 'changed', hits = 0")  # type: ignore[arg-type]
        conn.execute('delete from app."Opt Ions"')
        conn.execute("insert into app.\"Opt Ions\" values (1, 'again', 1), (2, 'again', 2)")
    pair.catch_up()
    pair.same("app.plain")
    assert pair.leaf("select count(*) from app.plain where v = 'changed'") == [(20,)]
    q = 'select id, v from app."Opt Ions" order by id'
    assert pair.leaf(q) == pair.root(q) == [(1, "again"), (2, "again")]


def test_schema_usage_opens_no_door(pair, make_role) -> None:
    """A role given USAGE on ferry_queue (what writers needed before) and owning a table of
    its own cannot insert an event, cannot queue an EXECUTE event through insert_event,
    cannot run a capture function nor attach one to its table, and queues nothing about a
    replicated table it may not read."""
    pair.root("create schema app")
    pair.root("create table app.secret (id int primary key, v text)")
    pair.leaf("create schema app")
    pair.leaf("create table app.secret (id int primary key, v text)")
    pair.add_tables("app.secret")
    pair.catch_up()
    (fn,) = pair.root(
        "select p.proname from pg_trigger t join pg_proc p on p.oid = t.tgfoid"
        " where t.tgrelid = 'app.secret'::regclass and t.tgname like '%capture'"
    )[0]
    rogue = make_role("rogue")
    role = sql.Identifier(rogue)
    pair.root(sql.SQL("grant usage on schema ferry_queue to {}").format(role))
    pair.root(sql.SQL("grant usage, create on schema app to {}").format(role))
    (part,) = pair.root(
        "select format('ferry_queue.event_%s_%s', queue_id, queue_cur_table) from ferry_queue.queue"
    )[0]
    before = events(pair)
    with as_role(pair, rogue) as conn:
        conn.execute("create table app.mine (id int primary key, v text)")
        for query in (
            f"insert into {part} (ev_part, ev_id, ev_type, ev_data)"
            " values (10, 1, 'EXECUTE', 'alter role rogue superuser')",
            "insert into ferry_queue.event (ev_part, ev_id, ev_type, ev_data)"
            " values (10, 1, 'EXECUTE', 'alter role rogue superuser')",
        ):
            assert refused(conn, query) == "42501"  # type: ignore[arg-type]
        assert (
            refused(
                conn,
                "select ferry_queue.insert_event(%s, 'EXECUTE', 'alter role rogue superuser')",
                (pair.queue,),
            )
            == "42501"
        )
        assert (
            refused(
                conn,
                "select ferry_queue.insert_event(%s, 'I:id', %s, 'app.secret')",
                (pair.queue, '{"id": 7, "v": "forged"}'),
            )
            == "42501"
        )
        # Its own table, a trigger naming the table it may not read.
        assert (
            refused(
                conn,
                sql.SQL(
                    "create trigger forge after insert on app.mine for each row"
                    " execute function ferry_queue.{}({}, 'app.secret', 'id')"
                ).format(sql.Identifier(fn), sql.Literal(pair.queue)),
            )
            == "42501"
        )
        assert (
            refused(
                conn,
                sql.SQL(
                    "create trigger forge after truncate on app.mine for each statement"
                    " execute function ferry_queue.capture_truncate({}, 'app.secret')"
                ).format(sql.Literal(pair.queue)),
            )
            == "42501"
        )
        assert refused(conn, "select ferry_queue.wake_ticker()") == "42501"
        assert refused(conn, "select * from app.secret") == "42501"
    assert events(pair) == before
    pair.catch_up()
    assert pair.leaf("select count(*) from app.secret") == [(0,)]


def test_plain_capture_in_c_needs_no_right_and_gives_none(pair, make_role) -> None:
    """Where plain capture runs in C (ferry_queue.plain_row_capture): a writer holding only
    its table's privileges replicates through it (inserts, key changes, deletes), and with
    USAGE on ferry_queue and CREATE on a schema of its own it can neither run the function
    nor attach it to its own table."""
    table = 'app."Plain Tab"'
    for node in (pair.root, pair.leaf):
        node("create schema app")
        node(f"create table {table} (id int primary key, v text)")  # type: ignore[arg-type]
    pair.add_tables(table)
    (fn,) = pair.root(
        "select p.proname from pg_trigger t join pg_proc p on p.oid = t.tgfoid"
        " where t.tgrelid = %s::regclass and t.tgname like '%%capture'",
        (table,),
    )[0]
    if fn != "plain_row_capture":
        pytest.skip(f"no plain row capture in C here: {table} is captured by {fn}")
    pair.catch_up()
    writer = make_role("writer")
    role = sql.Identifier(writer)
    pair.root(sql.SQL("grant usage, create on schema app to {}").format(role))
    pair.root(sql.SQL("grant usage on schema ferry_queue to {}").format(role))
    grant_table(pair, "app.Plain Tab", writer, "select, insert, update, delete")
    with as_role(pair, writer) as conn:
        conn.execute(f"insert into {table} select g, 'v' || g from generate_series(1, 10) g")  # type: ignore[arg-type]
        conn.execute(f"update {table} set id = id + 100 where id <= 5")  # type: ignore[arg-type]
        conn.execute(f"update {table} set v = 'changed' where id > 100")  # type: ignore[arg-type]
        conn.execute(f"delete from {table} where id in (6, 7)")  # type: ignore[arg-type]
        assert refused(conn, "select ferry_queue.plain_row_capture()") == "42501"
        conn.execute("create table app.mine (id int primary key)")
        assert (
            refused(
                conn,
                sql.SQL(
                    "create trigger forge after insert on app.mine for each row"
                    " execute function ferry_queue.plain_row_capture({}, 'app.mine', 'id')"
                ).format(sql.Literal(pair.queue)),
            )
            == "42501"
        )
    pair.catch_up()
    pair.same(table)
    assert pair.leaf(f"select count(*) from {table} where v = 'changed'") == [(5,)]  # type: ignore[arg-type]
    assert pair.leaf(f"select count(*) from {table}") == [(8,)]  # type: ignore[arg-type]


def test_a_capture_function_queues_only_its_own_table(pair, make_role) -> None:
    """However a capture trigger came onto another table (here the owner made it), its
    rows are refused there rather than queued under the name the trigger gives: the events
    name the table written, or a partition's parent."""
    pair.root("create schema app")
    pair.root("create table app.secret (id int primary key, v text)")
    pair.root("create table app.other (id int primary key, v text)")
    pair.root("create table app.parts (id int primary key, v text) partition by range (id)")
    pair.root("create table app.parts_1 partition of app.parts for values from (0) to (100)")
    pair.leaf("create schema app")
    pair.leaf("create table app.secret (id int primary key, v text)")
    pair.leaf("create table app.parts (id int primary key, v text)")
    pair.add_tables("app.secret", "app.parts")
    pair.catch_up()
    (fn,) = pair.root(
        "select p.proname from pg_trigger t join pg_proc p on p.oid = t.tgfoid"
        " where t.tgrelid = 'app.secret'::regclass and t.tgname like '%capture'"
    )[0]
    pair.root(
        sql.SQL(
            "create trigger forge after insert on app.other for each row"
            " execute function ferry_queue.{}({}, 'app.secret', 'id');"
            " create trigger forge_t after truncate on app.other for each statement"
            " execute function ferry_queue.capture_truncate({}, 'app.secret')"
        ).format(sql.Identifier(fn), sql.Literal(pair.queue), sql.Literal(pair.queue))
    )
    writer = make_role("writer")
    pair.root(sql.SQL("grant usage on schema app to {}").format(sql.Identifier(writer)))
    grant_table(pair, "app.other", writer, "insert, truncate")
    grant_table(pair, "app.parts", writer, "insert")
    before = events(pair)
    with as_role(pair, writer) as conn:
        for query in ("insert into app.other values (1, 'forged')", "truncate app.other"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as failure:
                conn.execute(query)  # type: ignore[arg-type]
            assert failure.value.diag.message_primary == (
                "capture of app.secret: trigger on app.other, another table"
            )
        conn.execute("insert into app.parts values (5, 'through a partition')")
    assert events(pair)[len(before) :] == [("I:id", "app.parts")]
    pair.catch_up()
    assert pair.leaf("select id, v from app.parts") == [(5, "through a partition")]
    assert pair.leaf("select count(*) from app.secret") == [(0,)]


def test_only_the_owner_holds_privileges(pair) -> None:
    """No function of pgferry's schemas, generated capture functions included (after a
    rotation too), may be run by PUBLIC; capture and wake-up run as their owner with a
    pinned search_path; no role but a table's owner may write any table or sequence."""
    for node in (pair.root, pair.leaf):
        node("create table public.t (id int primary key)")
        node("create table public.u (id int primary key, v text)")
        node("create table public.s (id int primary key)")
    pair.add_tables("public.t")
    root_add(pair, "public.u", "ignore=v")  # a templated function beside the plain one
    root_add(pair, "public.s", "capture=statement")  # and a statement function
    pair.root("select ferry_queue.maint_rotate_tables_step1(%s)", (pair.queue,))
    for node in (pair.root, pair.leaf):
        open_to_public = node(
            """
            select p.oid::regprocedure::text from pg_proc p
              join pg_namespace n on n.oid = p.pronamespace
             where n.nspname = any(%s)
               and (p.proacl is null
                    or exists (select from aclexplode(p.proacl) a where a.grantee = 0))
             order by 1
            """,
            (list(SCHEMAS),),
        )
        assert open_to_public == []
        writable = node(
            """
            select c.oid::regclass::text, a.grantee::regrole::text, a.privilege_type
              from pg_class c join pg_namespace n on n.oid = c.relnamespace
             cross join lateral aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
             where n.nspname = any(%s) and c.relkind in ('r', 'p', 'S')
               and a.grantee <> c.relowner and a.privilege_type <> 'SELECT'
            """,
            (list(SCHEMAS),),
        )
        assert writable == []
    captures = pair.root(
        """
        select p.proname, p.prosecdef, p.proconfig from pg_proc p
         where p.pronamespace = 'ferry_queue'::regnamespace
           and (p.proname like 'capture\\_%%'
                or p.proname in ('wake_ticker', 'capture_truncate', 'plain_row_capture'))
           and p.prorettype <> 'text'::regtype
         order by 1
        """
    )
    # The plain row function names every object with its schema instead of pinning the
    # path (it runs once per row): in PL/pgSQL as its owner, in C (where the server has it)
    # as the writer, switching to the queue's owner to read the queue and queue the event;
    # a statement function pins the path and its planner settings; the others pin the path.
    in_c = ("plain_row_capture", False, None) in captures
    plain = [] if in_c else [("capture_1_1", True, None)]
    n = 1 if in_c else 2
    assert [(name, secdef, config) for name, secdef, config in captures] == [
        *plain,
        (f"capture_1_{n}", True, ["search_path=pg_catalog, pg_temp"]),
        (
            f"capture_1_{n + 1}",
            True,
            [
                "search_path=pg_catalog, pg_temp",
                "jit=off",
                "enable_mergejoin=off",
                "enable_nestloop=off",
            ],
        ),
        ("capture_truncate", True, ["search_path=pg_catalog, pg_temp"]),
        *([("plain_row_capture", False, None)] if in_c else []),
        ("wake_ticker", True, ["search_path=pg_catalog, pg_temp"]),
    ]


def test_upgrade_takes_back_old_grants_on_queue_tables(db_a: str) -> None:
    """What writers used to be granted (USAGE on ferry_queue, INSERT on the event tables,
    USAGE on their sequence) is taken back by version 14; reading rights stay."""
    name = f"oldwriter_{uuid.uuid4().hex[:8]}"
    role = sql.Identifier(name)
    with psycopg.connect(db_a, autocommit=True) as conn:
        schema.install(conn, ("queue",))
        conn.execute("select ferry_queue.create_queue('q')")
        conn.execute(sql.SQL("create role {}").format(role))
        try:
            conn.execute(
                sql.SQL(
                    "grant usage on schema ferry_queue to {r};"
                    " grant insert, select on ferry_queue.event, ferry_queue.event_1_0 to {r};"
                    " grant insert on ferry_queue.tick, ferry_queue.subscription to public;"
                    " grant usage, select on sequence ferry_queue.event_1_id_seq to {r}"
                ).format(r=role)
            )
            (migration,) = [m for m in schema.migrations("queue") if m.version == 14]
            for _, text in migration.scripts():
                conn.execute(text)  # type: ignore[arg-type]
            left = conn.execute(
                """
                select c.relname, a.grantee, a.privilege_type
                  from pg_class c cross join lateral aclexplode(c.relacl) a
                 where c.relnamespace = 'ferry_queue'::regnamespace and a.grantee <> c.relowner
                 order by 1, 3
                """
            ).fetchall()
            oid = conn.execute("select %s::regrole::oid", (name,)).fetchone()[0]  # type: ignore[index]
        finally:
            conn.execute(sql.SQL("drop owned by {}; drop role {}").format(role, role))
    assert left == [
        ("event", oid, "SELECT"),
        ("event_1_0", oid, "SELECT"),
        ("event_1_id_seq", oid, "SELECT"),
    ]


HIJACK = """
create function app.spy(text, text) returns boolean language sql as
  $$ select pg_catalog.set_config('app.spied', current_user::text, false) is null $$;
create function app.spy_oid(oid, oid) returns boolean language sql as
  $$ select pg_catalog.set_config('app.spied', current_user::text, false) is null $$;
create function app.spy_cat(text, text) returns text language sql as
  $$ select pg_catalog.set_config('app.spied', current_user::text, false) $$;
create operator app.= (leftarg = text, rightarg = text, function = app.spy);
create operator app.<> (leftarg = text, rightarg = text, function = app.spy);
create operator app.<> (leftarg = oid, rightarg = oid, function = app.spy_oid);
create operator app.|| (leftarg = text, rightarg = text, function = app.spy_cat);
"""


def test_the_writers_search_path_does_not_reach_into_capture(pair, make_role) -> None:
    """A writer that puts operators of its own before pg_catalog in its search_path gets
    none of them run by capture, which runs as the queue's owner: plain, templated and by
    statement."""
    for node in (pair.root, pair.leaf):
        node("create schema app")
        node("create table app.p (id int primary key, v text)")
        node("create table app.o (id int primary key, v text, w text)")
        node("create table app.s (id int primary key, v text)")
    root_add(pair, "app.p")
    root_add(pair, "app.o", "ignore=w")
    root_add(pair, "app.s", "capture=statement")
    pair.cascade.add("leafnode", "app.p", "app.o", "app.s")
    pair.catch_up()
    writer = make_role("writer")
    pair.root(sql.SQL("grant usage, create on schema app to {}").format(sql.Identifier(writer)))
    for table in ("app.p", "app.o", "app.s"):
        grant_table(pair, table, writer, "insert, update, delete")
    with as_role(pair, writer) as conn:
        conn.execute(HIJACK)  # type: ignore[arg-type]
        conn.execute("set search_path = app, pg_catalog")
        for table in ("app.p", "app.o", "app.s"):
            conn.execute(f"insert into {table} (id, v) values (1, 'a'), (2, 'b')")  # type: ignore[arg-type]
            conn.execute(f"update {table} set v = 'c'")  # type: ignore[arg-type]
        conn.execute("delete from app.p")
        spied = conn.execute("select pg_catalog.current_setting('app.spied', true)").fetchone()
    assert spied in ((None,), ("",))
    pair.catch_up()
    assert pair.leaf("select count(*) from app.p") == [(0,)]
    assert pair.leaf("select id, v from app.o order by id") == [(1, "c"), (2, "c")]
    assert pair.leaf("select id, v from app.s order by id") == [(1, "c"), (2, "c")]


def test_a_rename_capture_did_not_follow_keeps_capturing(qconn) -> None:
    """A table renamed behind pgferry's back (capture-ddl off) is still captured under the
    name the subscribers know it by: the check refuses only a name that finds another table."""
    qconn.execute("select ferry_queue.create_queue('q')")
    qconn.execute("create table public.t (id int primary key)")
    qconn.execute("select ferry_queue.attach_capture('q', 'public.t')")
    qconn.execute("alter table public.t rename to t_new")
    qconn.execute("insert into public.t_new values (1)")
    qconn.execute("create table public.t (id int primary key)")  # the old name, another table
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="another table"):
        qconn.execute("insert into public.t_new values (2)")
    rows = qconn.execute("select ev_type, ev_data, ev_extra1 from ferry_queue.event").fetchall()
    assert rows == [("I:id", '{"id":1}', "public.t")]
