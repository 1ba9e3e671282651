"""Capture options end to end: a root captures as --trigger-flags / --trigger-arg say, a leaf
copies and replays accordingly, and the tables are compared row by row."""

from __future__ import annotations

import random
import threading

import psycopg
import pytest

from pgferry.cli.main import main
from pgferry.handlers.api import HandlerContext
from pgferry.node import capture, tableops
from pgferry.registry.routes import load_routes


def root_add(pair, *names: str, flags: str | None = None, args: tuple[str, ...] = (), **opts):
    options = tableops.AddTableOptions(trigger_flags=flags, trigger_args=args, **opts)
    with psycopg.connect(pair.root_dsn) as conn:
        return tableops.add_tables(pair.root_cfg, conn, list(names), options)


def leaf_add(pair, *names: str, **opts) -> None:
    with psycopg.connect(pair.leaf_dsn) as conn:
        tableops.add_tables(pair.leaf_cfg, conn, list(names), tableops.AddTableOptions(**opts))


def rows(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set timezone = 'UTC'")
        return conn.execute(query).fetchall()  # type: ignore[arg-type]


def multiset(pair, table: str) -> tuple[list[tuple], list[tuple]]:
    """Each distinct row of ``table`` with how many times it is there, on both sides."""
    query = f"select t::text, count(*) from {table} as t group by 1 order by 1"
    return rows(pair.root_dsn, query), rows(pair.leaf_dsn, query)


LOG_DDL = "create table public.log (at timestamptz, msg text, n int, j json)"


def _log_writer(dsn: str, stop: threading.Event, seed: int, done: list[int]) -> None:
    """Inserts (many duplicates), updates and deletes of some of several equal rows, no-op
    updates, and writers whose TimeZone differs (the same instant, spelled otherwise)."""
    rnd = random.Random(seed)
    zones = ("UTC", "Asia/Tokyo", "America/Los_Angeles")
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set() and done[0] < 400:
            conn.execute(f"set timezone = '{rnd.choice(zones)}'")  # type: ignore[arg-type]
            msg, n = rnd.choice("abc"), rnd.randrange(3)
            op = rnd.random()
            if op < 0.5:
                conn.execute(
                    "insert into log select '2024-05-06 07:08:09+00', %s, %s, '{\"k\": [1, 2]}'"
                    " from generate_series(1, %s)",
                    (msg, n, rnd.randrange(1, 4)),
                )
            elif op < 0.7:
                conn.execute(
                    "update log set n = n + 1 where ctid ="
                    " (select ctid from log where msg = %s and n = %s limit 1)",
                    (msg, n),
                )
            elif op < 0.8:
                conn.execute("update log set j = j where msg = %s", (msg,))  # changes nothing
            elif op < 0.9:
                conn.execute(
                    "delete from log where ctid ="
                    " (select ctid from log where msg = %s and n = %s limit 1)",
                    (msg, n),
                )
            else:
                with conn.transaction():  # in and out again in one transaction
                    conn.execute("insert into log values (now(), 'x', 9, null)")
                    conn.execute("delete from log where msg = 'x'")
            done[0] += 1


def test_keyless_log_table_under_load_with_a_rotation(pair) -> None:
    for side in (pair.root, pair.leaf):
        side(LOG_DDL)
    assert root_add(pair, "public.log") == ["public.log"]
    assert pair.root("select table_attrs->'capture' from ferry.table_info") == [
        ({"key": [], "key_from": "none"},)
    ]
    leaf_add(pair, "public.log", expect_sync=True)
    assert pair.leaf("select table_attrs->'capture' from ferry.table_info") == [
        ({"key": [], "key_from": "none"},)
    ]
    # A batch of inserts only, duplicates included, then one with everything.
    pair.root(
        "insert into log select '2024-01-01', 'a', g % 3, '[]' from generate_series(1, 300) g"
    )
    worker = pair.worker(replay_read_range_events="40", replay_read_ahead_events="0")
    pair.catch_up(worker)
    root, leaf = multiset(pair, "log")
    assert root == leaf and sum(r[1] for r in root) == 300
    pair.root("select ferry_queue.set_queue_config(%s, 'rotation_period', '0')", (pair.queue,))
    table_before = pair.root("select queue_cur_table from ferry_queue.queue")[0][0]
    stop, done = threading.Event(), [0]
    writers = [
        threading.Thread(target=_log_writer, args=(pair.root_dsn, stop, seed, done))
        for seed in (1, 2)
    ]
    for t in writers:
        t.start()
    try:
        rotated = False
        while any(t.is_alive() for t in writers):
            pair.tick()
            worker.work()
            if not rotated:  # once the leaf has passed the first table's events
                pair.root("select ferry_queue.maint_rotate_tables_step1(%s)", (pair.queue,))
                pair.root("select ferry_queue.maint_rotate_tables_step2()")
                now = pair.root("select queue_cur_table from ferry_queue.queue")[0][0]
                rotated = now != table_before
    finally:
        stop.set()
        for t in writers:
            t.join()
    assert rotated, "the queue never rotated"
    pair.catch_up(worker)
    root, leaf = multiset(pair, "log")
    assert root == leaf
    assert any(count > 1 for _, count in root)  # duplicates were there, and kept
    # Every delete found its row: nothing counted as divergence.
    assert pair.leaf("select diverged_rows, diverged_deletes from ferry_node.local_state") == [
        (0, 0)
    ]


def test_pkey_on_a_table_without_primary_key(pair) -> None:
    # The root has no key at all; one leaf table has a unique index on the key (upserts),
    # the other none (delete and insert).
    pair.root("create table acct (a int not null, b text not null, v text)")
    pair.root("create table acct2 (a int not null, b text not null, v text)")
    pair.leaf("create table acct (a int not null, b text not null, v text, unique (b, a))")
    pair.leaf("create table acct2 (a int not null, b text not null, v text)")
    root_add(pair, "acct", "acct2", args=("pkey=a,b",))
    leaf_add(pair, "acct", "acct2", expect_sync=True)
    worker = pair.worker()
    for table in ("acct", "acct2"):
        pair.root(f"insert into {table} select g, 'k' || g, 'v' from generate_series(1, 50) g")
    pair.catch_up(worker)
    for table in ("acct", "acct2"):
        pair.root(f"update {table} set v = 'changed' where a <= 10")
        pair.root(f"update {table} set b = 'moved' where a = 20")  # key change: D + I
        pair.root(f"delete from {table} where a between 30 and 35")
        pair.root(f"insert into {table} values (100, 'new', 'x')")
        pair.root(f"update {table} set v = 'again' where a = 100")  # same batch
    pair.catch_up(worker)
    for table in ("acct", "acct2"):
        query = f"select a, b, v from {table} order by a, b"
        assert pair.root(query) == pair.leaf(query)
        assert len(pair.leaf(query)) == 45
    with psycopg.connect(pair.leaf_dsn) as conn:
        routes = load_routes(conn, pair.queue, HandlerContext())
    assert routes["public.acct"].pk == ("a", "b") and routes["public.acct"].key_unique
    assert not routes["public.acct2"].key_unique  # applied by delete and insert
    with pair.running(every=0.5):
        assert main([str(pair.leaf_cfg.path), "compare"]) == 0


def test_a_unique_index_on_not_null_columns_serves_as_key(pair) -> None:
    for side in (pair.root, pair.leaf):
        side("create table u (code text not null, region int not null, v text unique,"
             " unique (region, code))")  # fmt: skip
    root_add(pair, "u")
    assert pair.root("select table_attrs->'capture' from ferry.table_info") == [
        ({"key": ["region", "code"], "key_from": "unique index u_region_code_key"},)
    ]
    leaf_add(pair, "u", expect_sync=True)
    worker = pair.worker()
    pair.root("insert into u select 'c' || g, g % 3, 'v' || g from generate_series(1, 30) g")
    pair.root("update u set v = 'w' || v where region = 1")
    pair.root("update u set code = 'moved' || code where region = 2")
    pair.root("delete from u where region = 0 and code < 'c2'")
    pair.catch_up(worker)
    query = "select region, code, v from u order by 1, 2"
    assert pair.root(query) == pair.leaf(query)
    keys = "select distinct substr(ev_type, 3) from ferry_queue.event where ev_extra1 = 'public.u'"
    assert pair.root(keys) == [("region,code",)]


@pytest.mark.slow
def test_ignore_and_when_in_copy_replay_and_compare(pair, capsys) -> None:
    pair.root("create table prof (id int primary key, name text, hits int, seen timestamptz)")
    pair.leaf("create table prof (id int primary key, name text, hits int default 42, seen text)")
    pair.root('create table ev (id int primary key, "Kind" text, v int)')
    pair.leaf('create table ev (id int primary key, "Kind" text, v int)')
    pair.root("insert into prof select g, 'n' || g, g, now() from generate_series(1, 20) g")
    pair.root("insert into ev select g, case when g % 2 = 0 then 'keep' else 'drop' end, g"
              " from generate_series(1, 20) g")  # fmt: skip
    root_add(pair, "prof", args=("ignore=hits,seen",))
    root_add(pair, "ev", args=("""when="Kind" = 'keep'""",))
    pair.root("select ferry_queue.ticker(%s)", (pair.queue,))
    leaf_add(pair, "prof", "ev")  # copied: without the ignored columns, only 'keep' rows
    worker = pair.catch_up(pair.worker(), timeout=240)  # the copy starts Spark
    assert pair.leaf("select count(*), min(hits), max(hits), count(seen) from prof") == [
        (20, 42, 42, 0)
    ]
    assert pair.leaf("select count(*) from ev where \"Kind\" = 'keep'") == [(10,)]
    assert pair.leaf("select count(*) from ev") == [(10,)]
    # The leaf keeps its own values of the ignored columns through replay.
    pair.leaf("set session_replication_role = replica; update prof set hits = 7 where id = 1")
    pair.root("update prof set hits = hits + 1, seen = now()")  # ignored only: no event
    pair.root("update prof set name = 'renamed' where id <= 2")
    pair.root("insert into prof values (21, 'new', 5, now())")
    pair.root("""update ev set "Kind" = 'keep' where id = 1""")  # enters
    pair.root("""update ev set "Kind" = 'drop' where id = 2""")  # leaves
    pair.root("""update ev set v = -v where "Kind" = 'drop'""")  # outside: nothing
    pair.root("""insert into ev values (21, 'drop', 0), (22, 'keep', 0)""")
    pair.catch_up(worker)
    assert pair.leaf(
        "select id, name, hits, seen from prof where id in (1, 2, 3, 21) order by 1"
    ) == [
        (1, "renamed", 7, None),
        (2, "renamed", 42, None),
        (3, "n3", 42, None),
        (21, "new", 42, None),
    ]
    keep = 'select id, "Kind", v from ev where "Kind" = \'keep\' order by id'
    assert pair.root(keep) == pair.leaf('select id, "Kind", v from ev order by id')
    capsys.readouterr()
    with pair.running(every=0.5):
        assert main([str(pair.leaf_cfg.path), "compare"]) == 0
    out = capsys.readouterr().out
    assert "Results do not match" not in out and "public.prof" in out and "public.ev" in out


def test_skip_flag_and_operations(pair) -> None:
    for side in (pair.root, pair.leaf):
        side("create table qt (id int primary key, v text)")
        side("create table no_del (id int primary key, v text)")
    root_add(pair, "qt", flags="S")
    root_add(pair, "no_del", flags="IU")
    leaf_add(pair, "qt", "no_del", expect_sync=True)
    worker = pair.worker()
    pair.root("insert into qt select g, 'q' from generate_series(1, 5) g")
    pair.root("insert into no_del select g, 'a' from generate_series(1, 5) g")
    pair.root("update no_del set v = 'b' where id = 1")
    pair.root("delete from no_del where id <= 2")  # not captured
    pair.catch_up(worker)
    assert pair.root("select count(*) from qt") == [(0,)]  # the root keeps nothing
    assert pair.leaf("select id, v from qt order by id") == [(g, "q") for g in range(1, 6)]
    assert pair.leaf("select id, v from no_del order by id") == [(1, "b")] + [
        (g, "a") for g in range(2, 6)
    ]
    assert pair.root("select table_attrs from ferry.table_info where table_name = 'public.qt'") == [
        ({"tgflags": "S", "capture": {"key": ["id"], "before": True, "skip": True}},)
    ]


def test_readding_with_new_arguments_loses_no_event(pair) -> None:
    """Writers keep inserting while the table is added again and again with other
    arguments: every row is captured once, by the spec in force when it was written."""
    pair.root("create table t (id bigserial primary key, v text, w text)")
    root_add(pair, "t")
    stop = threading.Event()

    def write() -> None:
        with psycopg.connect(pair.root_dsn, autocommit=True) as conn:
            while not stop.is_set():
                conn.execute("insert into t (v, w) values ('v', 'w')")

    writer = threading.Thread(target=write)
    writer.start()
    specs = [("ignore=w", "ev_extra3='1'"), ("backup", "ev_extra3='2'"), ("ev_extra3='3'",), ()]
    try:
        for args in specs:
            pair.root("select pg_sleep(0.05)")
            assert root_add(pair, "t", args=args, force=True) == ["public.t"]
        pair.root("select pg_sleep(0.05)")
    finally:
        stop.set()
        writer.join()
    events = pair.root(
        "select (ev_data::json->>'id')::bigint, ev_extra3, ev_data::json->>'w'"
        " from ferry_queue.event where ev_type = 'I:id' order by ev_id"
    )
    assert sorted(e[0] for e in events) == [r[0] for r in pair.root("select id from t")]
    tags = [e[1] for e in events]
    runs = [t for i, t in enumerate(tags) if i == 0 or tags[i - 1] != t]
    assert runs == [None, "1", "2", "3", None]  # each spec in turn, none lost or repeated
    assert all((e[2] is None) == (e[1] == "1") for e in events)  # ignore=w of the first


def test_no_triggers_leaves_triggers_to_the_operator(pair) -> None:
    pair.root("create table t (id int primary key, v text)")
    root_add(pair, "t", args=("ignore=v",), no_triggers=True)
    triggers = "select count(*) from pg_trigger where tgrelid = 't'::regclass"
    assert pair.root(triggers) == [(0,)]
    attrs = pair.root("select table_attrs from ferry.table_info")[0][0]
    assert attrs["no_triggers"] and attrs["capture"]["no_triggers"]
    # The operator makes the trigger from the stored capture; pgferry keeps off it.
    pair.root(
        "select ferry_queue.attach_capture_spec(%s, 't', table_attrs->'capture')"
        " from ferry.table_info",
        (pair.queue,),
    )
    with psycopg.connect(pair.root_dsn) as conn:
        capture.attach(conn, pair.queue, "public.t", deny=True)  # as a takeover does
    pair.root("insert into t values (1, 'x')")
    assert pair.root("select ev_data from ferry_queue.event") == [('{"id":1}',)]
    with psycopg.connect(pair.root_dsn) as conn:
        tableops.remove_tables(pair.root_cfg, conn, ["t"], False, False)
    assert pair.root(triggers) == [(2,)]
