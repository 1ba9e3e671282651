"""Capture's CPU per one-row statement: the backend's own CPU time, no trigger against the
plain capture in PL/pgSQL and in C.

One throw-away cluster (``fsync`` off: the CPU, not the disk), one table of 10,000 rows, one
connection per phase running N one-row UPDATEs (the key kept: a ``U`` event each) and N
one-row INSERTs into another table, each statement its own transaction (the C function
reads its queue once per transaction, so a transaction of one row is its worst case).  The
CPU is the backend's user + system time from ``/proc`` (clock ticks), so that other load on
the machine changes the figures less than it would wall-clock time.  Phases rotate, three
rounds; medians.

    .venv/bin/python -m bench.capture_cpu [--rows 10000] [--rounds 3]

The C phase needs the library (``make capture-c``); without it the phase says so and runs
PL/pgSQL again.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import psycopg

from pgferry import schema
from pgferry.testing.cluster import make_cluster

PHASES = ("none", "plpgsql", "c")
FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def backend_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_phase(connstr: str, phase: str, rows: int) -> tuple[str, float, float]:
    """(capture function, µs of CPU per UPDATE, per INSERT) of one phase."""
    with psycopg.connect(connstr, autocommit=True) as conn:
        for table in ("t", "u"):
            conn.execute("select ferry_queue.detach_capture('q', %s)", (table,))
        conn.execute("truncate u")
        if phase != "none":
            conn.execute("select set_config('ferry_queue.row_capture', %s, false)", (phase,))
            for table in ("t", "u"):
                conn.execute("select ferry_queue.attach_capture('q', %s)", (table,))
        row = conn.execute(
            "select coalesce((select tgfoid::regproc::text from pg_trigger"
            " where tgname = '_ferry_q_capture' limit 1), 'no trigger'), pg_backend_pid()"
        ).fetchone()
        assert row is not None
        function, pid = row
        for n in range(200):  # plans and caches made before the count
            conn.execute("update t set v = v + 1 where id = %s", (n + 1,))
        started = backend_cpu(pid)
        for n in range(rows):
            conn.execute("update t set v = v + 1 where id = %s", (n % 10_000 + 1,))
        updated = backend_cpu(pid)
        for n in range(rows):
            conn.execute("insert into u values (%s, 1, 'some text value')", (n,))
        inserted = backend_cpu(pid)
    return function, 1e6 * (updated - started) / rows, 1e6 * (inserted - updated) / rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cluster = make_cluster("capcpu", **FAST)
    results: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASES}
    try:
        connstr = cluster.createdb("cpu")
        with psycopg.connect(connstr, autocommit=True) as conn:
            schema.install(conn, ("queue",))
            conn.execute("select ferry_queue.create_queue('q')")
            conn.execute("create table t (id int primary key, v int, s text)")
            conn.execute(
                "insert into t select g, 0, 'some text value' from generate_series(1, 10000) g"
            )
            conn.execute("create table u (id int primary key, v int, s text)")
            conn.execute("vacuum analyze t")
        for rnd in range(args.rounds):
            for phase in PHASES[rnd % 3 :] + PHASES[: rnd % 3]:
                function, update, insert = run_phase(connstr, phase, args.rows)
                results[phase].append((update, insert))
                print(f"round {rnd + 1} {phase:<8} {function:<34} update {update:6.1f} µs"
                      f"  insert {insert:6.1f} µs", flush=True)  # fmt: skip
    finally:
        cluster.destroy()
    base_u = statistics.median(u for u, _ in results["none"])
    base_i = statistics.median(i for _, i in results["none"])
    print(f"\n{'phase':<10}{'update µs':>10}{'over none':>11}{'insert µs':>11}{'over none':>11}")
    for phase, values in results.items():
        upd = statistics.median(u for u, _ in values)
        ins = statistics.median(i for _, i in values)
        print(f"{phase:<10}{upd:>10.1f}{upd - base_u:>11.1f}{ins:>11.1f}{ins - base_i:>11.1f}")


if __name__ == "__main__":
    main()
