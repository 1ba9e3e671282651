"""Merged partitions: two shard roots, each its own queue, feed one combined database.

The combined database holds a merge leaf of each shard's queue (``create-leaf --merge``);
``add-table --merge-all`` adds the table on both.  Under writes on both shards, both parts
are copied (the first truncates what was in the table, the second copies on top) and
replayed; the combined table equals the union of the shards.  A TRUNCATE on one shard does
not touch the other's rows, a single part cannot be resynced while the other holds rows,
``resync --merge-all`` copies both again, and conflicting registrations fail with one line.
"""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgferry.cli.main import main
from pgferry.config import load_config
from pgferry.testing.cascade import Runner, Ticker, write_ini
from pgferry.testing.load import Load

TABLE = 'public."Merged é"'
TABLE_ID = sql.Identifier("public", "Merged é")
OWN = "public.own"
ROWS = 20_000
BASE = {"s1": 0, "s2": 1_000_000}  # the shards' keys never meet
_sets = itertools.count(1)


def shard_load(dsn: str, base: int, seed: int) -> Load:
    """Random upserts and deletes in one shard's key range until stopped."""
    rng = random.Random(seed)
    upsert = sql.SQL(
        "insert into {t} values (%s, %s) on conflict (id) do update set v = {t}.v || 'u'"
    ).format(t=TABLE_ID)
    delete = sql.SQL("delete from {t} where id = %s").format(t=TABLE_ID)

    def unit(conn: psycopg.Connection, _done: int) -> None:
        for _ in range(rng.randint(1, 4)):
            key = base + rng.randint(1, ROWS + 500)
            if rng.random() < 0.8:
                conn.execute(upsert, (key, "w"))
            else:
                conn.execute(delete, (key,))

    return Load(dsn, unit, every=0.01)


class Merged:
    """The two shard roots and the combined database's two merge leaves."""

    def __init__(self, tmp_path: Path, capsys, dsns: dict[str, str]) -> None:
        n = next(_sets)
        self.capsys, self.dsns, self.tmp = capsys, dsns, tmp_path
        self.queues = {"s1": f"mq{n}a", "s2": f"mq{n}b"}
        self.mset = f"mset{n}"
        self.inis: dict[str, Path] = {}
        self.runners: list[Runner] = []
        self.tickers: list[Ticker] = []
        for shard in ("s1", "s2"):
            self.inis[shard] = self._ini(f"{shard}root{n}", dsns[shard], self.queues[shard])
            self.inis["c" + shard] = self._ini(f"c{shard}{n}", dsns["c"], self.queues[shard])

    def _ini(self, job: str, db: str, queue: str) -> Path:
        return write_ini(self.tmp / f"{job}.ini", "londiste3", job_name=job, db=db,
                         queue_name=queue, loop_delay="0.1", exception_sleep="0.2")  # fmt: skip

    def cli(self, who: str, *args: str) -> tuple[int, str]:
        self.capsys.readouterr()
        code = main([str(self.inis[who]), *args])
        out = self.capsys.readouterr()
        return code, out.out + out.err

    def sql(self, who: str, query, params=None) -> list[tuple]:
        with psycopg.connect(self.dsns[who], autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def rows(self, who: str) -> list[tuple]:
        return self.sql(who, sql.SQL("select id, v from {} order by id").format(TABLE_ID))

    def states(self, table: str = TABLE) -> list[tuple]:
        return self.sql(
            "c",
            "select queue_name, merge_state from ferry.table_info where table_name = %s order by 1",
            (table,),
        )

    def start(self) -> None:
        for shard in ("s1", "s2"):
            ticker = Ticker([self.dsns[shard]], self.queues[shard])
            ticker.start()
            self.tickers.append(ticker)
            runner = Runner(load_config(self.inis["c" + shard]))
            runner.start()
            self.runners.append(runner)

    def stop(self) -> None:
        for thread in [*self.runners, *self.tickers]:
            thread.stop()
        self.runners, self.tickers = [], []

    def wait_ok(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while {s for _, s in self.states()} != {"ok"} or len(self.states()) != 2:
            errors = [r.errors[-2:] for r in self.runners if r.errors]
            assert time.monotonic() < deadline, f"not ok: {self.states()}; errors: {errors}"
            time.sleep(0.2)

    def caught_up(self, timeout: float = 300) -> None:
        """Tick both shards and wait until each leaf applied its shard's tick."""
        for shard in ("s1", "s2"):
            queue = self.queues[shard]
            before = self.sql(shard, "select ferry_queue.force_tick(%s)", (queue,))[0][0]
            self.sql(shard, "select ferry_queue.ticker(%s)", (queue,))
            # The ticker thread may have made the forced tick: take the newest one.
            tick = self.sql(shard, "select max(tick_id) from ferry_queue.tick")[0][0]
            assert tick > before
            deadline = time.monotonic() + timeout
            while True:
                got = self.sql(
                    "c",
                    "select last_tick_id from ferry_node.local_state where queue_name = %s",
                    (queue,),
                )[0][0]
                if (got or 0) >= tick:
                    break
                assert time.monotonic() < deadline, f"{shard} not at tick {tick}"
                time.sleep(0.1)


@pytest.fixture
def merged(new_db_a, new_db_b, tmp_path: Path, capsys):
    m = Merged(tmp_path, capsys, {"s1": new_db_a(None), "s2": new_db_b(None), "c": new_db_a(None)})
    try:
        yield m
    finally:
        m.stop()


def _setup(m: Merged) -> None:
    create = "create table {} (id int primary key, v text)"
    for who in ("s1", "s2", "c"):
        m.sql(who, sql.SQL(create).format(TABLE_ID))
        m.sql(who, "create table own (id int primary key)")
    for shard in ("s1", "s2"):
        base = BASE[shard]
        m.sql(shard, sql.SQL("insert into {} select %s + g, 'r' from generate_series(1, %s) g")
              .format(TABLE_ID), (base, ROWS))  # fmt: skip
        assert m.cli(shard, "create-root", f"{shard}root")[0] == 0
        assert m.cli(shard, "add-table", TABLE, OWN)[0] == 0
    # Rows the first part's copy must clear.
    m.sql("c", sql.SQL("insert into {} values (-1, 'junk'), (2000001, 'junk')").format(TABLE_ID))
    for shard in ("s1", "s2"):
        code, out = m.cli("c" + shard, "create-leaf", f"c{shard}", f"--provider={m.dsns[shard]}",
                          f"--merge={m.mset}")  # fmt: skip
        assert code == 0, out


def test_two_shards_merge_into_one_table(merged: Merged) -> None:
    m = merged
    _setup(m)
    code, out = m.cli("cs1", "node-info")
    assert m.mset in out
    code, out = m.cli("cs1", "add-table", TABLE, "--merge-all")
    assert code == 0, out
    assert [q for q, _ in m.states()] == sorted(m.queues.values())
    loads = [shard_load(m.dsns[s], BASE[s], i) for i, s in enumerate(("s1", "s2"))]
    for load in loads:
        load.start()
    try:
        m.start()
        m.wait_ok()
        while min(load.done for load in loads) < 50:
            time.sleep(0.1)
    finally:
        for load in loads:
            load.stop()
    m.caught_up()
    union = sorted(m.rows("s1") + m.rows("s2"))
    assert m.rows("c") == union

    # A TRUNCATE of one shard is not replayed: the other shard's rows stay, and so do its
    # own (nothing tells them apart); later rows of that shard arrive.
    before_s2 = m.rows("s2")
    m.sql("s2", sql.SQL("truncate {}").format(TABLE_ID))
    m.sql("s2", sql.SQL("insert into {} values (1999999, 'after')").format(TABLE_ID))
    m.caught_up()
    assert m.rows("c") == sorted(m.rows("s1") + before_s2 + [(1999999, "after")])

    # A script queued on both shards runs once here; compare leaves merged tables alone.
    script = m.tmp / "addcol.sql"
    script.write_text('alter table public."Merged é" add column extra int;\n')
    for shard in ("s1", "s2"):
        code, out = m.cli(shard, "execute", str(script))
        assert code == 0, out
    m.caught_up()
    assert m.sql("c", "select count(*) from ferry.applied_execute")[0][0] == 1
    assert all(r.errors == [] for r in m.runners), [r.errors for r in m.runners]
    code, out = m.cli("cs1", "compare", TABLE)
    assert code != 0 and "is merged from several partitions" in out, out

    # One part cannot be copied again while the other holds rows; both together can.
    code, out = m.cli("cs2", "resync", TABLE)
    assert code != 0 and "is merged with queue" in out and "--merge-all" in out
    code, out = m.cli("cs2", "resync", TABLE, "--merge-all")
    assert code == 0, out
    m.wait_ok()
    m.caught_up()
    assert m.rows("c") == sorted(m.rows("s1") + m.rows("s2"))


def test_merge_conflicts_fail_with_one_line(merged: Merged) -> None:
    m = merged
    _setup(m)
    cases = [
        ("cs1", [TABLE, "--merge-all", "--no-merge"], "--merge-all and --no-merge exclude"),
        ("s1", [OWN, "--force", "--no-merge"], "are for merge leaves"),
    ]
    for who, args, message in cases:
        code, out = m.cli(who, "add-table", *args)
        assert code != 0 and message in out, out
    # own is this part's own table on cs1; cs2 may not feed it too, merged or not.
    assert m.cli("cs1", "add-table", OWN, "--no-merge")[0] == 0
    for extra in ([], ["--no-merge"]):
        code, out = m.cli("cs2", "add-table", OWN, *extra)
        assert code != 0 and "merge conflict" in out, out
        assert len([x for x in out.splitlines() if x.startswith("pgferry:")]) == 1
    assert m.states(OWN) == [(m.queues["s1"], None)]
    # A merged table cannot be some other queue's own.
    assert m.cli("cs2", "add-table", TABLE)[0] == 0
    code, out = m.cli("cs1", "add-table", TABLE, "--no-merge")
    assert code != 0 and "merge conflict" in out
    code, out = m.cli("cs1", "create-leaf", "x", "--provider=" + m.dsns["s1"],
                      f"--merge={m.queues['s1']}")  # fmt: skip
    assert code != 0 and "--merge needs a name other than this node's queue" in out
    code, out = m.cli("cs1", "create-branch", "x", "--merge=q")
    assert code != 0
