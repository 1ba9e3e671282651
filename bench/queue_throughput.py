"""Queue throughput: events per second inserted (by capture triggers), ticked and consumed.

On a throw-away cluster (fast settings), two phases:

- live: writer connections insert rows into a captured table (transactions of ``--txn``
  rows) while a ticker ticks every ``--tick`` seconds and one consumer (the Python
  :class:`~pgferry.queue.consumer.Consumer`, cursor-streamed) reads batches concurrently;
  reports the insert rate, the consume rate and the time from the last commit until the
  consumer has seen every event;
- backlog: the consumer is stopped while the same load is produced, then drains the backlog
  alone: the pure read rate of the queue.

    .venv/bin/python -m bench.queue_throughput [--events 200000] [--writers 2]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import psycopg

from pgferry import schema
from pgferry.queue.consumer import BatchReader, Consumer
from pgferry.testing.cluster import make_cluster

HERE = Path(__file__).resolve().parent
QUEUE = "bench"


def write(connstr: str, first: int, count: int, txn: int) -> None:
    with psycopg.connect(connstr) as conn:
        for start in range(first, first + count, txn):
            stop = min(start + txn, first + count)
            with conn.cursor() as cur:
                cur.executemany(
                    "insert into t (id, login_time, ip, note) values (%s, now(), '10.0.0.1', 'x')",
                    [(i,) for i in range(start, stop)],
                )
            conn.commit()


def produce(connstr: str, base: int, events: int, writers: int, txn: int) -> float:
    per = events // writers
    threads = [
        threading.Thread(target=write, args=(connstr, base + w * per, per, txn))
        for w in range(writers)
    ]
    started = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - started


def ticker(connstr: str, period: float, stop: threading.Event) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        while not stop.wait(period):
            conn.execute("select ferry_queue.ticker()")
        conn.execute("select ferry_queue.force_tick(%s)", (QUEUE,))
        conn.execute("select ferry_queue.ticker()")


class Reader:
    """Consumes batches until ``target`` events were seen."""

    def __init__(self, connstr: str, target: int) -> None:
        self.consumer = Consumer(connstr, QUEUE, "reader", fetch_size=1000)
        self.target = target
        self.seen = 0
        self.batches = 0
        self.done_at = 0.0

    def handle(self, batch: BatchReader) -> None:
        self.seen += sum(1 for _ in batch.events())
        self.batches += 1

    def run(self) -> None:
        while self.seen < self.target:
            if self.consumer.process_batch(self.handle) is None:
                time.sleep(0.01)
        self.done_at = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--txn", type=int, default=10, help="rows per writer transaction")
    parser.add_argument("--tick", type=float, default=0.5, help="ticker period, seconds")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "queue_throughput.json")
    args = parser.parse_args()

    cluster = make_cluster("qbench")
    result: dict[str, object] = {"events": args.events, "writers": args.writers, "txn": args.txn}
    try:
        connstr = cluster.createdb("bench")
        with psycopg.connect(connstr) as conn:
            schema.install(conn, ("queue",))
        with psycopg.connect(connstr, autocommit=True) as conn:
            conn.execute(
                "create table t (id bigint primary key, login_time timestamp, ip inet, note text)"
            )
            conn.execute("select ferry_queue.create_queue(%s)", (QUEUE,))
            conn.execute(
                "select ferry_queue.set_queue_config(%s, 'ticker_max_count', '5000')", (QUEUE,)
            )
            conn.execute("select ferry_queue.attach_capture(%s, 't')", (QUEUE,))
        reader = Reader(connstr, args.events)
        reader.consumer.register()

        # live: produce, tick and consume at the same time
        stop = threading.Event()
        tick_thread = threading.Thread(target=ticker, args=(connstr, args.tick, stop))
        read_thread = threading.Thread(target=reader.run)
        tick_thread.start()
        read_thread.start()
        started = time.perf_counter()
        elapsed = produce(connstr, 0, args.events, args.writers, args.txn)
        stop.set()
        tick_thread.join()
        read_thread.join()
        result["live_insert_ev_s"] = args.events / elapsed
        result["live_consume_ev_s"] = args.events / (reader.done_at - started)
        result["live_drain_after_last_commit_s"] = reader.done_at - started - elapsed
        result["live_batches"] = reader.batches

        # backlog: produce with nobody reading, then drain
        stop = threading.Event()
        tick_thread = threading.Thread(target=ticker, args=(connstr, args.tick, stop))
        tick_thread.start()
        elapsed = produce(connstr, args.events, args.events, args.writers, args.txn)
        stop.set()
        tick_thread.join()
        reader.target, reader.batches = reader.seen + args.events, 0
        started = time.perf_counter()
        reader.run()
        result["backlog_insert_ev_s"] = args.events / elapsed
        result["backlog_consume_ev_s"] = args.events / (reader.done_at - started)
        result["backlog_batches"] = reader.batches
        reader.consumer.close()
    finally:
        cluster.destroy()
    for key, value in result.items():
        print(f"{key:<34} {value:,.1f}" if isinstance(value, float) else f"{key:<34} {value}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
