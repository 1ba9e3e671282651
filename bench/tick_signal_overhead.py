"""What it would cost the writers to wake the ticker themselves (event-driven ticking).

The ticker daemon finds out that events wait by asking every ``ticker_period`` (1 s) while
a queue is idle, so the first event after a quiet spell waits up to that long for its tick.
Waking the ticker from the writers instead needs a signal in every writing transaction:
here a statement-level trigger on the queue's event tables (the capture trigger itself is
left alone) that either

* ``notify``: always calls ``pg_notify('ferry_queue_ticker', queue)`` (PostgreSQL sends one
  notification per transaction, at commit), or
* ``flag``: reads a one-row flag table that a sleeping ticker would set, and notifies only
  when it is set; measured with the flag cleared, as under load (the ticker is awake).

Same cluster, data, load and rotation of phases as ``bench/capture_overhead.py`` (whose
helpers this uses): the seed load's tps with pgferry's capture triggers alone and with
each signal, plus a connection that listens and reads the notifications as a ticker would.

    .venv/bin/python -m bench.tick_signal_overhead [--seconds 30] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
from pathlib import Path

import psycopg

from bench.capture_overhead import DURABLE, QUEUE, SEED, TABLES, run_phase, setup, ticker
from pgferry.testing.cluster import make_cluster

HERE = Path(__file__).resolve().parent
PHASES = ("pgferry", "notify", "flag")

SIGNAL_SQL = """
create table if not exists public.ticker_sleeping (sleeping boolean not null);
insert into public.ticker_sleeping values (false);
create or replace function public.wake_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('ferry_queue_ticker', tg_argv[0]);
    return null;
end $$;
create or replace function public.wake_flag() returns trigger language plpgsql as $$
begin
    if (select sleeping from public.ticker_sleeping) then
        perform pg_notify('ferry_queue_ticker', tg_argv[0]);
    end if;
    return null;
end $$;
"""


def set_phase(connstr: str, phase: str) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        for table in TABLES:
            name = f"digoal_01.{table}"
            conn.execute("select ferry_queue.detach_capture(%s, %s)", (QUEUE, name))
            conn.execute("select ferry_queue.attach_capture(%s, %s)", (QUEUE, name))
        parts = [
            r[0]
            for r in conn.execute(
                "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid"
                " where i.inhparent = 'ferry_queue.event'::regclass"
            ).fetchall()
        ]
        for part in parts:
            conn.execute(f"drop trigger if exists bench_wake on ferry_queue.{part}")  # type: ignore[arg-type]
            if phase != "pgferry":
                conn.execute(
                    f"create trigger bench_wake after insert on ferry_queue.{part}"  # type: ignore[arg-type]
                    f" for each statement execute function public.wake_{phase}('{QUEUE}')"
                )
        conn.execute("checkpoint")


def listener(connstr: str, stop: threading.Event, seen: list[int]) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        conn.execute("listen ferry_queue_ticker")
        while not stop.is_set():
            try:
                seen[0] += sum(1 for _ in conn.notifies(timeout=0.5))
            except psycopg.Error:
                return  # the cluster goes away at the end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--json", type=Path, default=HERE / "results" / "tick_signal.json")
    args = parser.parse_args()

    cluster = make_cluster("bench", **DURABLE)
    stop = threading.Event()
    results: dict[str, list[float]] = {p: [] for p in PHASES}
    notified: dict[str, list[int]] = {p: [] for p in PHASES}
    seen = [0]
    try:
        connstr = setup(cluster, SEED)
        with psycopg.connect(connstr, autocommit=True) as conn:
            conn.execute(SIGNAL_SQL)  # type: ignore[arg-type]
        threads = [
            threading.Thread(target=ticker, args=(connstr, stop), daemon=True),
            threading.Thread(target=listener, args=(connstr, stop, seen), daemon=True),
        ]
        for thread in threads:
            thread.start()
        for rep in range(args.reps):
            order = PHASES[rep % len(PHASES) :] + PHASES[: rep % len(PHASES)]
            for phase in order:
                set_phase(connstr, phase)
                before = seen[0]
                tps = run_phase(cluster, SEED, args.seconds, args.clients)
                results[phase].append(tps)
                notified[phase].append(seen[0] - before)
                print(f"rep {rep + 1} {phase:<8} {tps:9.1f} tps, {seen[0] - before} notifications")
    finally:
        stop.set()
        cluster.destroy()
    base = statistics.median(results["pgferry"])
    summary = {
        phase: {
            "median_tps": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "share_of_pgferry": statistics.median(values) / base,
            "runs": values,
            "notifications": notified[phase],
        }
        for phase, values in results.items()
    }
    print(f"\n{'phase':<9}{'median tps':>12}{'min':>10}{'max':>10}{'share':>8}")
    for phase, row in summary.items():
        print(
            f"{phase:<9}{row['median_tps']:>12.1f}{row['min']:>10.1f}{row['max']:>10.1f}"
            f"{row['share_of_pgferry']:>8.3f}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"seconds": args.seconds, "reps": args.reps, **summary}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
