"""Catch-up replay of the dispatch handler against the default handler (bulk).

One root cluster and one leaf cluster (``make_cluster``); on the leaf cluster one database
per subscriber, all leaves of the root's queue, each replicating ``public.events`` (id
bigint primary key, userid int, payload text, at timestamptz) with another handler:

* ``bulk``: the default handler (collapsed rows, delete + upsert);
* ``plain``: ``dispatch`` by batch time, daily partitions, row_mode=plain;
* ``latest``: ``dispatch`` by the ``at`` column, monthly partitions, row_mode=keep_latest;
* ``all``: ``dispatch`` by event time, daily partitions, row_mode=keep_all (its table has
  its own ``vid bigserial`` key: every version is a row).

Each round makes a backlog on the root while no worker runs: INSERTS new rows (``at``
spread over twelve months), then UPDATES updates and DELETES deletes of random earlier
rows, in transactions of 1,000 rows with a tick every 10,000 events, as a busy root with a
ticker would.  Then each leaf's worker (in this process, Spark off) replays the backlog
alone, timed from its first step to the moment it holds the root's last tick: events/s =
the backlog's events / that time.  The leaves take turns in a rotating order, one round
after another.  At the end every leaf is checked against the root (bulk, plain and
latest hold exactly the root's rows; all holds one row per insert and update).

    .venv/bin/python -m bench.dispatch_replay                      # 3 rounds, ~3-5 min
    .venv/bin/python -m bench.dispatch_replay --inserts 50000 --rounds 1   # a quick look
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from pgferry.apply.worker import Worker
from pgferry.config import load_config
from pgferry.node import setup, tableops
from pgferry.testing.cluster import make_cluster

HERE = Path(__file__).resolve().parent

QUEUE = "dispatch_bench"
TABLE = "create table events (id bigint primary key, userid int, payload text, at timestamptz)"
KEEP_ALL_TABLE = (
    "create table events (vid bigserial primary key, id bigint, userid int, payload text,"
    " at timestamptz)"
)
LEAVES: dict[str, list[str] | None] = {
    "bulk": None,
    "plain": ["part_mode=batch_time", "period=day", "row_mode=plain"],
    "latest": ["part_mode=date_field", "part_field=at", "period=month", "row_mode=keep_latest"],
    "all": ["part_mode=event_time", "period=day", "row_mode=keep_all"],
}
CHUNK = 1000  # rows per root transaction
TICK_EVERY = 10  # transactions between ticks


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inserts", type=int, default=150_000, help="new rows per round")
    p.add_argument("--updates", type=int, default=60_000, help="updates per round")
    p.add_argument("--deletes", type=int, default=10_000, help="deletes per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--durable", action="store_true", help="fsync and full_page_writes on")
    p.add_argument("--json", type=Path, default=HERE / "results" / "dispatch_replay.json")
    return p.parse_args(argv)


class Node:
    def __init__(self, name: str, dsn: str, workdir: Path) -> None:
        self.name, self.dsn = name, dsn
        self.ini = workdir / f"{name}.ini"
        self.ini.write_text(
            "[pgferry]\n"
            f"job_name = bench_{name}\ndb = {dsn}\nqueue_name = {QUEUE}\n"
            "loop_delay = 0.05\nexception_sleep = 1\nspark_warm = false\n"
        )
        self.worker: Worker | None = None

    def sql(self, query: str, params: tuple | None = None) -> list[tuple]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def create(self, node_type: str, provider: Node | None = None) -> None:
        cfg = load_config(self.ini)
        req = setup.build_request(cfg, node_type, self.name, None, provider and provider.dsn)
        setup.create_node(cfg, req)

    def add(self, **opts: object) -> None:
        with psycopg.connect(self.dsn) as conn:
            tableops.add_tables(
                load_config(self.ini), conn, ["public.events"], tableops.AddTableOptions(**opts)
            )

    def last_tick(self) -> int | None:
        rows = self.sql(
            "select last_tick_id from ferry_node.local_state where queue_name = %s", (QUEUE,)
        )
        return rows[0][0] if rows else None

    def catch_up(self, target: int, timeout: float = 1800) -> float:
        """Run the worker until it holds ``target``; seconds it took."""
        if self.worker is None:
            self.worker = Worker(load_config(self.ini))
        started = time.monotonic()
        while (
            self.last_tick() != target
            or self.sql(
                "select count(*) from ferry.table_info where merge_state is distinct from 'ok'"
            )[0][0]
        ):
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{self.name}: no catch-up to tick {target} in {timeout}s")
            if not self.worker.work():
                time.sleep(0.01)
        return time.monotonic() - started

    def close(self) -> None:
        if self.worker is not None:
            self.worker.conns.close()


def tick(root: Node) -> int:
    with psycopg.connect(root.dsn, autocommit=True) as conn:
        conn.execute("select ferry_queue.force_tick(%s)", (QUEUE,))
        conn.execute("select ferry_queue.ticker(%s)", (QUEUE,))
        row = conn.execute(
            "select last_tick_id from ferry_queue.get_queue_info(%s)", (QUEUE,)
        ).fetchone()
    assert row is not None
    return row[0]


def backlog(root: Node, first_id: int, args: argparse.Namespace) -> int:
    """Write one round's changes on the root; returns the events queued."""
    steps: list[str] = []
    for lo in range(first_id, first_id + args.inserts, CHUNK):
        hi = min(lo + CHUNK, first_id + args.inserts) - 1
        steps.append(
            f"insert into events select g, g % 1000, md5(g::text),"
            f" timestamptz '2024-01-01 00:00+00' + (g % 365) * interval '1 day'"
            f" + (g % 86400) * interval '1 second' from generate_series({lo}, {hi}) g"
        )
    top = first_id + args.inserts - 1
    for _ in range(0, args.updates, CHUNK):
        steps.append(
            "update events set payload = md5(random()::text), userid = userid + 1"
            f" where id in (select 1 + floor(random() * {top})::bigint"
            f" from generate_series(1, {CHUNK}))"
        )
    for _ in range(0, args.deletes, CHUNK):
        steps.append(
            f"delete from events where id in (select 1 + floor(random() * {top})::bigint"
            f" from generate_series(1, {CHUNK}))"
        )
    before = _events(root)
    with psycopg.connect(root.dsn, autocommit=True) as conn:
        for i, step in enumerate(steps, 1):
            conn.execute(step)  # type: ignore[arg-type]
            if i % TICK_EVERY == 0:
                conn.execute("select ferry_queue.force_tick(%s)", (QUEUE,))
                conn.execute("select ferry_queue.ticker(%s)", (QUEUE,))
    return _events(root) - before


def _events(root: Node) -> int:
    row = root.sql(
        "select n_tup_ins + n_tup_upd + n_tup_del from pg_stat_user_tables"
        " where relid = 'public.events'::regclass"
    )
    return int(row[0][0])


def _settled_events(root: Node, want_at_least: int, before: int) -> int:
    """Table statistics arrive a moment after the commit: wait for them to settle."""
    deadline = time.monotonic() + 30
    seen = _events(root) - before
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _events(root) - before
        if now == seen and now >= want_at_least:
            return now
        seen = now
    return seen


def verify(root: Node, leaves: dict[str, Node], versions: int) -> dict[str, bool]:
    rows = "select count(*), sum(hashtext(id::text || payload || userid || at)) from events"
    want = root.sql(rows)
    out = {}
    for name, leaf in leaves.items():
        if name == "all":
            out[name] = leaf.sql("select count(*) from events")[0][0] == versions
        else:
            out[name] = leaf.sql(rows) == want
    return out


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    settings = {"fsync": "on", "full_page_writes": "on"} if args.durable else {}
    workdir = Path(tempfile.mkdtemp(prefix="pgferry-dispatch-bench-"))
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    c_root = make_cluster("dispatch-root", **settings)
    c_leaf = make_cluster("dispatch-leaf", **settings)
    leaves: dict[str, Node] = {}
    times: dict[str, list[float]] = {name: [] for name in LEAVES}
    events_per_round: list[int] = []
    try:
        root = Node("root", c_root.createdb("root"), workdir)
        root.create("root")
        root.sql(TABLE)
        root.add()
        for name, handler_args in LEAVES.items():
            leaf = Node(name, c_leaf.createdb(f"leaf_{name}"), workdir)
            leaf.create("leaf", root)
            leaf.sql(KEEP_ALL_TABLE if name == "all" else TABLE)
            if handler_args is None:
                leaf.add(expect_sync=True)  # empty on both sides: no copy (no Spark)
            else:
                leaf.add(handler="dispatch", handler_args=handler_args, expect_sync=True)
            leaf.catch_up(tick(root))
            leaves[name] = leaf
        first_id, versions = 1, 0
        for rnd in range(args.rounds):
            before = _events(root)
            backlog(root, first_id, args)
            target = tick(root)
            events = _settled_events(root, args.inserts, before)
            first_id += args.inserts
            inserts_updates = root.sql(
                "select n_tup_ins + n_tup_upd from pg_stat_user_tables"
                " where relid = 'public.events'::regclass"
            )[0][0]
            versions = int(inserts_updates)
            events_per_round.append(events)
            order = list(LEAVES)[rnd % len(LEAVES) :] + list(LEAVES)[: rnd % len(LEAVES)]
            for name in order:
                seconds = leaves[name].catch_up(target)
                times[name].append(seconds)
                print(f"round {rnd + 1} {name:<7} {events} events in {seconds:6.2f} s"
                      f" = {events / seconds:9.0f} events/s", flush=True)  # fmt: skip
        checked = verify(root, leaves, versions)
    finally:
        for leaf in leaves.values():
            leaf.close()
        c_root.destroy()
        c_leaf.destroy()
        shutil.rmtree(workdir, ignore_errors=True)
    end_load = os.getloadavg()
    total_events = sum(events_per_round)
    summary = {}
    print(f"\n{'leaf':<8}{'median s':>10}{'events/s':>12}{'vs bulk':>9}  correct")
    base = total_events / sum(times["bulk"])
    for name in LEAVES:
        rate = total_events / sum(times[name])
        summary[name] = {"seconds": times[name], "events_per_s": round(rate),
                         "vs_bulk": round(rate / base, 3), "correct": checked[name]}  # fmt: skip
        print(f"{name:<8}{statistics.median(times[name]):>10.2f}{rate:>12.0f}"
              f"{rate / base:>9.2f}  {checked[name]}")  # fmt: skip
    print(f"load average at end: {end_load[0]:.2f} {end_load[1]:.2f} {end_load[2]:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "events_per_round": events_per_round,
                "durable": args.durable,
                "load_start": load,
                "load_end": end_load,
                "leaves": summary,
            },
            indent=2,
        )
    )
    if not all(checked.values()):
        raise SystemExit(f"leaves differ from the root: {checked}")


if __name__ == "__main__":
    main(sys.argv[1:])
