"""A lake leaf in steady state and catching up, beside a PostgreSQL leaf of the same root.

On a throw-away cluster: a root, a Delta lake leaf (``lake_compact_interval``
COMPACT) and a PostgreSQL leaf (handler bulk), one table ``t (id bigint primary key, v
text, n numeric(12,2))``; the workers loop in threads and the root ticks every TICK
seconds (as the ticker does while events wait).

1. **latency**: a writer commits ROWS_PER_S rows a second (in commits of 20) for
   SECONDS; a poller reads each leaf's highest id every 50 ms (the Delta table's, at its
   newest version) and takes, for every id that became visible, the time since its
   commit; p50 / p95 / max per leaf.
2. **catch-up**: the leaves' workers stopped, the writer commits BACKLOG_S seconds of
   inserts and updates as fast as it can; then the workers start again and the time until
   each leaf holds the root's last tick gives its events per second.

    .venv/bin/python -m bench.lake_latency --seconds 60 --backlog-s 60
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import machine, write_results
from pgferry.db import connect
from pgferry.testing.cascade import Cascade
from pgferry.testing.cluster import make_cluster

DDL = "create table t (id bigint primary key, v text, n numeric(12,2))"


def _writer(dsn: str, stop: threading.Event, commits: dict[int, float], rate: float) -> None:
    next_id = max(commits, default=0) + 1
    with connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            began = time.monotonic()
            ids = range(next_id, next_id + 20)
            conn.execute(
                "insert into t select g, md5(g::text), g / 7.0 from unnest(%s::bigint[]) g",
                (list(ids),),
            )
            now = time.time()
            for i in ids:
                commits[i] = now
            next_id += 20
            if rate:
                time.sleep(max(0.0, 20 / rate - (time.monotonic() - began)))


def _lake_max(path: str) -> int:
    import pyarrow.compute as pc

    from pgferry.lake import delta

    ids = delta.rows_at(path, columns=["id"])["id"]
    return pc.max(ids).as_py() or 0 if len(ids) else 0


def _pg_max(conn) -> int:
    return conn.execute("select coalesce(max(id), 0) from t").fetchone()[0]


def _latency(cascade: Cascade, lake: str, seconds: float, rate: float, tick: float) -> dict:
    commits: dict[int, float] = {}
    seen: dict[str, list[float]] = {"lake": [], "pg": []}
    stop = threading.Event()
    with cascade.running("lake", "pg", every=tick):
        writer = threading.Thread(target=_writer, args=(cascade.dsns["root"], stop, commits,
                                                        rate))  # fmt: skip
        writer.start()
        tops = {"lake": 0, "pg": 0}
        ends = time.monotonic() + seconds
        with connect(cascade.dsns["pg"], autocommit=True) as pg:
            while time.monotonic() < ends + 10:
                if time.monotonic() >= ends:
                    stop.set()
                for name, read in (("lake", lambda: _lake_max(lake)), ("pg", lambda: _pg_max(pg))):
                    top = read()
                    now = time.time()
                    for i in range(tops[name] + 1, top + 1):
                        if i in commits:
                            seen[name].append(now - commits[i])
                    tops[name] = max(tops[name], top)
                if stop.is_set() and all(t >= max(commits, default=0) for t in tops.values()):
                    break
                time.sleep(0.05)
        writer.join()

    def stats(values: list[float]) -> dict:
        values = sorted(values)
        if not values:
            return {}
        return {"rows": len(values), "p50_s": round(statistics.median(values), 3),
                "p95_s": round(values[int(len(values) * 0.95) - 1], 3),
                "max_s": round(values[-1], 3)}  # fmt: skip

    return {name: stats(values) for name, values in seen.items()}


def _catch_up(cascade: Cascade, backlog_s: float, tick: float) -> dict:
    commits: dict[int, float] = {}
    root = cascade.dsns["root"]
    with connect(root, autocommit=True) as conn:
        start_id = conn.execute("select coalesce(max(id), 0) from t").fetchone()[0]
    commits[start_id] = 0.0
    stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(root, stop, commits, 0.0))
    ticking = threading.Event()

    def ticks() -> None:
        with connect(root, autocommit=True) as conn:
            while not ticking.wait(tick):
                conn.execute("select ferry_queue.force_tick(%s)", (cascade.queue,))
                conn.execute("select ferry_queue.ticker(%s)", (cascade.queue,))

    ticker = threading.Thread(target=ticks)
    ticker.start()
    writer.start()
    time.sleep(backlog_s)
    stop.set()
    writer.join()
    with connect(root, autocommit=True) as conn:
        conn.execute("update t set v = v || '+' where id > %s and id %% 3 = 0", (start_id,))
    ticking.set()
    ticker.join()
    events = (max(commits) - start_id) * 4 // 3
    result = {"events": events}
    for name in ("lake", "pg"):
        began = time.monotonic()
        cascade.catch_up(name, timeout=1800)
        seconds = time.monotonic() - began
        result[name] = {"seconds": round(seconds, 1), "events_per_s": round(events / seconds)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rows-per-s", type=float, default=200)
    parser.add_argument("--backlog-s", type=float, default=60)
    parser.add_argument("--tick", type=float, default=0.5)
    parser.add_argument("--compact", default="50")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    work = Path(tempfile.mkdtemp(prefix="pgferry-lake-latency-"))
    cluster = make_cluster("lake-latency")
    doc: dict = {"machine": machine(), "started": started.isoformat(), "args": vars(args)}
    try:
        cascade = Cascade("lakelat", work)
        lake = work / "lake"
        for name in ("root", "lake", "pg"):
            cascade.dsns[name] = cluster.createdb(f"lat_{name}")
        cascade.node("root", cascade.dsns["root"], "root")
        cascade.node("lake", cascade.dsns["lake"], "leaf", "root", lake_path=str(lake),
                     lake_compact_interval=args.compact)  # fmt: skip
        cascade.node("pg", cascade.dsns["pg"], "leaf", "root")
        cascade.sql("root", DDL)
        cascade.add("root", "public.t")
        cascade.add("lake", "public.t", handler="lake", create=True)
        cascade.add("pg", "public.t", create=True)
        cascade.catch_up("lake", "pg")
        doc["latency"] = _latency(cascade, str(lake / "public" / "t"), args.seconds,
                                  args.rows_per_s, args.tick)  # fmt: skip
        doc["catch_up"] = _catch_up(cascade, args.backlog_s, args.tick)
        cascade.close()
    finally:
        cluster.destroy()
    path = write_results(doc, "lake_latency", started, args.out)
    print(doc["latency"])
    print(doc["catch_up"])
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
