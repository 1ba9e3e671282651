"""A batch's summary read with its range inlined (planned at every batch) and with its
range as parameters (prepared once, generic plan), by batch size.

One throw-away cluster, one queue and consumer.  For each size, a batch of that many row
events (one transaction, three tables) is queued behind ``--backlog`` events of earlier
batches still in the event table, ticked and opened; its summary (the grouped summary the
worker reads, ``apply/replay/batch_sql.py``) is then run ``--reps`` times each way, timed by the
server (``EXPLAIN (ANALYZE)``: planning and execution apart):

* ``literal``: the text with the range inlined (``batch_event_sql``), as every batch
  before: planned at each run, a custom plan for its range;
* ``generic``: the same summary on ``generic_event_sql`` with ``$1 .. $6``, prepared once,
  run with ``EXECUTE`` under the settings replay gives it (``GENERIC_PLAN``:
  ``plan_cache_mode = force_generic_plan``, no sequential scan).

Printed per size: the medians of planning and execution (ms) of each, the generic
plan's planning and execution over the literal's, and the scans each plan uses.  Where
the generic plan (index probes on ``ev_txid``) runs slower than the literal one's
planning plus execution, a batch of that size should keep the inlined text.

    .venv/bin/python -m bench.batch_reads [--sizes 10,100,2000,20000,200000] [--reps 7]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics

import psycopg
from psycopg import sql

from pgferry import schema
from pgferry.apply.replay.batch_sql import Segment, grouped_summary_query
from pgferry.apply.replay.read import GENERIC_PLAN
from pgferry.apply.replay.summary import summary_settings
from pgferry.db import connect
from pgferry.queue import batches as queue_batches
from pgferry.queue.batches import EVENT_RANGE_TYPES, BatchRule
from pgferry.testing.cluster import make_cluster

_TIME = re.compile(r"^(Planning|Execution) Time: ([\d.]+) ms$")
_SCAN = re.compile(r"((?:Seq|Index|Index Only|Bitmap Heap|Bitmap Index) Scan)")


def _times(rows: list[tuple]) -> tuple[float, float]:
    """(planning, execution) ms of an EXPLAIN ANALYZE's text."""
    found = {"Planning": 0.0, "Execution": 0.0}
    for (line,) in rows:
        match = _TIME.match(line.strip())
        if match:
            found[match.group(1)] = float(match.group(2))
    return found["Planning"], found["Execution"]


def _queue_events(conn: psycopg.Connection, n: int) -> None:
    conn.execute(
        "select ferry_queue.insert_event('q', 'U:id', json_build_object('id', g, 'v', g)::text,"
        " 'public.t' || (g %% 3), null, null, null) from generate_series(1, %s) g",
        (n,),
    )


def _tick(conn: psycopg.Connection) -> None:
    conn.execute("select ferry_queue.force_tick('q')")
    conn.execute("select ferry_queue.ticker('q')")


def measure(conn: psycopg.Connection, size: int, reps: int) -> dict:
    _queue_events(conn, size)
    _tick(conn)
    batch, _ = queue_batches.take_batch(conn, "q", "c", BatchRule())
    assert batch is not None and batch.event_sql and batch.events
    seqs: list[str] = []
    settings = summary_settings(size)
    literal = grouped_summary_query(batch.event_sql, seqs, Segment())
    generic = grouped_summary_query(queue_batches.generic_event_sql(conn), seqs, Segment())
    values = ", ".join(sql.Literal(v).as_string(conn) for v in batch.events.args())
    conn.execute(f"prepare s{size} ({', '.join(EVENT_RANGE_TYPES)}) as {generic}")  # type: ignore[arg-type]
    out: dict[str, list[tuple[float, float]]] = {"literal": [], "generic": []}
    scans: dict[str, list[str]] = {}
    for _ in range(reps):
        for kind, text in (("literal", literal), ("generic", f"execute s{size} ({values})")):
            with conn.transaction():
                for setting in settings:
                    conn.execute(setting)  # type: ignore[arg-type]
                if kind == "generic":
                    for setting in GENERIC_PLAN:
                        conn.execute(setting)  # type: ignore[arg-type]
                rows = conn.execute(f"explain (analyze, timing off) {text}").fetchall()  # type: ignore[arg-type]
            out[kind].append(_times(rows))
            scans[kind] = sorted({m.group(1) for (line,) in rows if (m := _SCAN.search(line))})
    queue_batches.finish_batch(conn, batch.batch_id)
    result: dict = {"size": size}
    for kind, runs in out.items():
        result[kind] = {
            "plan_ms": statistics.median(p for p, _ in runs),
            "exec_ms": statistics.median(e for _, e in runs),
            "scans": scans[kind],
        }
    lit = result["literal"]["plan_ms"] + result["literal"]["exec_ms"]
    gen = result["generic"]["plan_ms"] + result["generic"]["exec_ms"]
    result["generic_over_literal"] = gen / lit if lit else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,100,2000,20000,200000")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--backlog", type=int, default=100000)
    args = parser.parse_args()
    cluster = make_cluster("batch-reads")
    try:
        dsn = cluster.connstr("postgres")
        with connect(dsn) as conn:
            schema.install(conn, ("queue",))
        with connect(dsn, autocommit=True) as conn:
            conn.execute("select ferry_queue.create_queue('q')")
            conn.execute("select ferry_queue.register_consumer('q', 'c')")
            _queue_events(conn, args.backlog)  # earlier batches' events, still there
            _tick(conn)
            old, _ = queue_batches.take_batch(conn, "q", "c", BatchRule())
            assert old is not None
            queue_batches.finish_batch(conn, old.batch_id)
            results = [measure(conn, int(s), args.reps) for s in args.sizes.split(",")]
    finally:
        cluster.destroy()
    print("size     literal plan/exec ms   generic plan/exec ms   generic/literal")
    for r in results:
        lit, gen = r["literal"], r["generic"]
        print(
            f"{r['size']:>7}  {lit['plan_ms']:>8.3f} / {lit['exec_ms']:>9.3f}"
            f"   {gen['plan_ms']:>8.3f} / {gen['exec_ms']:>9.3f}   {r['generic_over_literal']:.2f}"
            f"   {','.join(lit['scans'])} | {','.join(gen['scans'])}"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
