"""shard: two leaves each keep their shard of the root's tables, through an initial copy
under write load and replay; a shard branch passes on only its shard."""

from __future__ import annotations

import random
import threading

import psycopg
import pytest

from pgferry.errors import UsageError
from pgferry.handlers import HandlerError

TABLES = (
    "create table t (id int primary key, v text)",
    'create table "G" (id int primary key, grp int not null, v text)',
)


class Writer(threading.Thread):
    """Random inserts, updates and deletes on the root, a few rows per transaction;
    updates of "G".grp move rows between shards (grp is not its key)."""

    def __init__(self, dsn: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rng = dsn, random.Random(seed)
        self.halt = threading.Event()
        self.next_id = 100_000
        self.commits = 0

    def run(self) -> None:
        with psycopg.connect(self.dsn) as conn:
            while not self.halt.wait(0.005):
                with conn.transaction():
                    for _ in range(self.rng.randint(1, 5)):
                        self._one(conn)
                self.commits += 1

    def _one(self, conn: psycopg.Connection) -> None:
        op, key = self.rng.random(), self.rng.randint(1, 3000)
        if op < 0.3:
            self.next_id += 1
            conn.execute("insert into t values (%s, 'new')", (self.next_id,))
            conn.execute('insert into "G" values (%s, %s, %s)', (self.next_id, key, "new"))
        elif op < 0.6:
            conn.execute("update t set v = v || '+' where id = %s", (key,))
        elif op < 0.8:
            conn.execute("update \"G\" set grp = grp + 1, v = 'moved' where id = %s", (key,))
        else:
            conn.execute("delete from t where id = %s", (key,))
            conn.execute('delete from "G" where id = %s', (key + 1,))

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)


def _shard_of(c, table: str, key: str, nr: int) -> list[tuple]:
    return c.sql(
        "root", f"select * from {table} where (hashtext(({key})::text) & 1) = {nr} order by id"
    )


def test_two_shards_under_load(make_cascade, db_a, db_b, new_db_b):
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("s0", db_b, "leaf", "root")
    c.node("s1", new_db_b(None), "leaf", "root")
    for node in ("root", "s0", "s1"):
        for ddl in TABLES:
            c.sql(node, ddl)
    c.add("root", "t", '"G"')
    c.sql("root", "insert into t select g, 'v' || g from generate_series(1, 3000) g")
    c.sql("root", "insert into \"G\" select g, g % 97, 'v' from generate_series(1, 3000) g")
    writer = Writer(db_a, seed=7)
    writer.start()
    try:
        for node, nr in (("s0", 0), ("s1", 1)):
            args = ["key=id", f"shard_nr={nr}", "shard_mask=1"]
            c.add(node, "t", handler="shard", handler_args=args)
            c.add(node, '"G"', handler="part", handler_args=["hash_key=grp", *args[1:]])
        c.catch_up("s0", "s1", timeout=240)  # the copies run while the writer writes
    finally:
        writer.stop()
    assert writer.commits > 50
    c.catch_up("s0", "s1")
    for table, key in (("t", "id"), ('"G"', "grp")):
        root = c.sql("root", f"select * from {table} order by id")
        got = [c.sql(n, f"select * from {table} order by id") for n in ("s0", "s1")]
        assert got[0] == _shard_of(c, table, key, 0), table
        assert got[1] == _shard_of(c, table, key, 1), table
        assert not {r[0] for r in got[0]} & {r[0] for r in got[1]}
        assert sorted(got[0] + got[1]) == root
        assert got[0] and got[1]
    # compare takes the source's rows of each leaf's shard only.
    with c.running("s0", "s1"):
        for node in ("s0", "s1"):
            done = c.cli(node, "compare")
            assert done.code == 0, done.out + done.err
        # A row of shard 1 slipped into shard 0's table behind replication's back.
        stray = c.sql("root", "select g from generate_series(200000, 200100) g"
                      " where (hashtext(g::text) & 1) = 1 limit 1")[0][0]  # fmt: skip
        c.sql("s0", f"set session_replication_role = replica; insert into t values ({stray}, 'x')")
        assert c.cli("s0", "compare", "t").code == 1
    # tables shows the handler as added (the alias stored under its handler's name).
    query = "select table_attrs from ferry.table_info where table_name = 'public.\"G\"'"
    attrs = c.sql("s1", query)
    assert attrs[0][0]["handler"] == "shard"
    assert attrs[0][0]["handler_args"] == {"key": "grp", "shard_nr": "1", "shard_mask": "1"}


def test_shard_branch_forwards_its_shard(make_cascade, db_a, db_b, new_db_b):
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("branch", db_b, "branch", "root")
    c.node("leaf", new_db_b(None), "leaf", "branch")
    for node in ("root", "branch", "leaf"):
        c.sql(node, TABLES[0])
        c.sql(node, TABLES[1])
    c.add("root", "t", '"G"')
    c.sql("root", "insert into t select g, 'v' from generate_series(1, 400) g")
    c.sql("root", "insert into \"G\" select g, g, 'v' from generate_series(1, 400) g")
    c.add("branch", "t", handler="shard", handler_args=["key=id", "shard_nr=1", "shard_mask=3"])
    c.add("branch", '"G"', handler="shard", handler_args=["key=grp", "shard_nr=1", "shard_mask=3"])
    c.catch_up("branch")
    c.add("leaf", "t", '"G"')  # copied from the branch: its shard only
    c.catch_up("branch", "leaf")
    c.sql("root", "insert into t select g, 'w' from generate_series(401, 800) g")
    c.sql("root", "update t set v = 'u' where id % 7 = 0")
    c.sql("root", "delete from t where id % 11 = 0")
    c.sql("root", 'update "G" set grp = grp + 1 where id % 3 = 0')  # rows change shards
    c.catch_up("branch", "leaf")
    for table, key in (("t", "id"), ('"G"', "grp")):
        want = c.sql(
            "root", f"select * from {table} where (hashtext(({key})::text) & 3) = 1 order by id"
        )
        assert c.sql("branch", f"select * from {table} order by id") == want
        assert c.sql("leaf", f"select * from {table} order by id") == want
    # Only shard 1's events of t travelled into the branch's queue since the copy.
    forwarded = c.sql(
        "branch",
        "select count(*) filter (where (hashtext((ev_data::json->>'id')) & 3) <> 1),"
        " count(*) from ferry_queue.event where ev_extra1 = 'public.t'",
    )
    assert forwarded[0][0] == 0 and forwarded[0][1] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["key=id", "shard_nr=2", "shard_mask=1"], "shard_nr 2 is not a shard of shard_mask 1"),
        (["key=id", "shard_nr=0", "shard_mask=-1"], "shard_mask must not be negative"),
        (["key=nosuch", "shard_nr=0", "shard_mask=1"], "has no column nosuch"),
        (["key=id", "shard_nr=0", "shard_mask=1", "hash_func=nosuch"], "no function nosuch"),
        (["key=id", "shard_nr=0", "shard_mask=1", "hash_func=x y"], "is not a function name"),
        (["key=id", "shard_nr=0", "shard_mask=1", "hash_func=md5"], "must return integer"),
        (["key=id", "shard_nr=0"], "needs argument shard_mask"),
        (["key=id", "shard_nr=0", "shard_mask=1", "disable_replay=maybe"], "must be 0 or 1"),
    ],
)
def test_bad_shard_arguments(make_cascade, db_a, db_b, args, message):
    c = make_cascade()
    c.node("root", db_a, "root")
    c.node("leaf", db_b, "leaf", "root")
    for node in ("root", "leaf"):
        c.sql(node, TABLES[0])
    c.add("root", "t")
    with pytest.raises((HandlerError, UsageError), match=message):
        c.add("leaf", "t", handler="shard", handler_args=args)
    assert c.sql("leaf", "select count(*) from ferry.table_info where local")[0][0] == 0
