"""Capture of large statements: a 1M-row UPDATE and a 500k-row INSERT ... SELECT, timed
without capture, with pgferry's capture and with Londiste's C trigger, in one run.

One throw-away cluster (PostgreSQL's default durability settings, as in the Londiste anchor
run), a table ``t (id int primary key, v int, pad text)`` of ``--rows`` rows and an empty
table ``t2`` like it.  Each repetition runs every phase, in a rotating order so that
background load hits all alike: ``none`` (no trigger), ``statement`` (pgferry's statement
triggers, ``capture=statement``), ``row`` (pgferry's plain row trigger, ``attach_capture``:
a table without capture options), ``londiste`` (``pgq.logutriga`` as ``londiste
add-table`` creates it).  A phase times ``update t set v = v + 1`` and
``insert into t2 select ... `` of ``--rows // 2`` rows
(server time, autocommit); between statements the event tables and ``t2`` are emptied and
``t`` vacuumed, untimed.  Printed: the median wall seconds and backend CPU seconds
(``/proc/<pid>/stat``: less moved by other work on the machine than wall time) per phase
and statement, and their ratio to ``none`` from the same run.  ``--small`` also measures
the backend CPU of UPDATE statements of 1, 10 and 100 rows (µs per statement, 2000 of
each, in one transaction), to show where statement capture and the row trigger cross
over.

    .venv/bin/python -m bench.capture_statement [--rows 1000000] [--reps 3]
        [--phases none,statement,row,londiste] [--small]

Needs the pgq extension (``apt-get install postgresql-15-pgq3``) for the phase londiste.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import psycopg

from pgferry import schema
from pgferry.testing.cluster import make_cluster

HERE = Path(__file__).resolve().parent
QUEUE = "q"
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
           "max_wal_size": "4GB"}  # fmt: skip
PHASES = ("none", "statement", "row", "londiste")
SMALL = (1, 10, 100)


def setup(connstr: str, rows: int, pgq: bool) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        conn.execute("create table public.t (id int primary key, v int not null, pad text)")
        conn.execute("create table public.t2 (id int primary key, v int not null, pad text)")
        conn.execute(
            "insert into public.t select g, 0, md5(g::text) from generate_series(1, %s) g",
            (rows,),
        )
        conn.execute("vacuum analyze")
        if pgq:
            conn.execute("create extension pgq")
            conn.execute("select pgq.create_queue(%s)", (QUEUE,))
    with psycopg.connect(connstr) as conn:
        schema.install(conn, ("queue",))
    with psycopg.connect(connstr, autocommit=True) as conn:
        conn.execute("select ferry_queue.create_queue(%s)", (QUEUE,))


def set_triggers(connstr: str, phase: str) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        for name in ("public.t", "public.t2"):
            conn.execute("select ferry_queue.detach_capture(%s, %s)", (QUEUE, name))
            conn.execute(f"drop trigger if exists _londiste_{QUEUE} on {name}")  # type: ignore[arg-type]
            if phase == "statement":
                conn.execute(
                    "select ferry_queue.attach_capture_spec(%s, %s, %s)",
                    (QUEUE, name, json.dumps({"key": ["id"], "capture": "statement"})),
                )
            elif phase == "row":  # what a table without capture options gets
                conn.execute("select ferry_queue.attach_capture(%s, %s)", (QUEUE, name))
            elif phase == "londiste":
                conn.execute(
                    f"create trigger _londiste_{QUEUE} after insert or update or delete"  # type: ignore[arg-type]
                    f" on {name} for each row execute procedure pgq.logutriga('{QUEUE}')"
                )


def empty(connstr: str, pgq: bool) -> None:
    """Empty t2 and the event tables, vacuum t: untimed, between statements."""
    with psycopg.connect(connstr, autocommit=True) as conn:
        parents = ["'ferry_queue.event'::regclass"]
        if pgq:
            parents.append("'pgq.event_template'::regclass")
        for (child,) in conn.execute(
            "select inhrelid::regclass::text from pg_inherits"  # type: ignore[arg-type]
            f" where inhparent in ({', '.join(parents)})"
        ).fetchall():
            conn.execute(f"truncate {child}")  # type: ignore[arg-type]
        conn.execute("alter table public.t2 disable trigger all")
        conn.execute("truncate public.t2")
        conn.execute("alter table public.t2 enable trigger all")
        conn.execute("vacuum public.t")
        conn.execute("checkpoint")


def backend_cpu(conn: psycopg.Connection) -> float:
    """CPU seconds (user + system) of the connection's backend so far."""
    with open(f"/proc/{conn.info.backend_pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(connstr: str, statement: str, *params: object) -> tuple[float, float]:
    """Wall and backend CPU seconds of one statement (autocommit)."""
    with psycopg.connect(connstr, autocommit=True) as conn:
        cpu = backend_cpu(conn)
        started = time.perf_counter()
        conn.execute(statement, params)  # type: ignore[arg-type]
        return time.perf_counter() - started, backend_cpu(conn) - cpu


def small(connstr: str, size: int, count: int) -> float:
    """Backend CPU µs per statement of ``count`` UPDATE statements of ``size`` rows each,
    in one transaction (no commit's flush in the times)."""
    with psycopg.connect(connstr) as conn:
        conn.execute("select 1")
        cpu = backend_cpu(conn)
        for i in range(count):
            low = (i * size) % 500_000 + 1
            conn.execute(
                "update public.t set v = v + 1 where id between %s and %s",
                (low, low + size - 1),
                prepare=True,
            )
        return 1e6 * (backend_cpu(conn) - cpu) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--small", action="store_true", help="also time 1-100 row statements")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "capture_statement.json")
    args = parser.parse_args()
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        parser.error(f"--phases: unknown phase {', '.join(unknown) or '(none given)'}")
    pgq = "londiste" in phases
    half = args.rows // 2
    cluster = make_cluster("bench", **DURABLE)
    times: dict[str, dict[str, list[tuple[float, float]]]] = {
        p: {"update": [], "insert": []} for p in phases
    }
    smalls: dict[str, dict[int, list[float]]] = {p: {n: [] for n in SMALL} for p in phases}
    try:
        connstr = cluster.createdb("bench")
        setup(connstr, args.rows, pgq)
        for rep in range(args.reps):
            order = phases[rep % len(phases) :] + phases[: rep % len(phases)]
            for phase in order:
                set_triggers(connstr, phase)
                empty(connstr, pgq)
                upd = timed(connstr, "update public.t set v = v + 1")
                empty(connstr, pgq)
                ins = timed(
                    connstr,
                    "insert into public.t2 select g, 0, md5(g::text) from generate_series(1, %s) g",
                    half,
                )
                times[phase]["update"].append(upd)
                times[phase]["insert"].append(ins)
                line = (
                    f"rep {rep + 1} {phase:<9} update {upd[0]:7.2f} s (cpu {upd[1]:6.2f})"
                    f"  insert {ins[0]:7.2f} s (cpu {ins[1]:6.2f})"
                )
                if args.small:
                    empty(connstr, pgq)
                    for size in SMALL:
                        smalls[phase][size].append(small(connstr, size, 2000))
                    line += "  " + "  ".join(
                        f"{n} rows {smalls[phase][n][-1]:5.0f} µs" for n in SMALL
                    )
                print(line, flush=True)
    finally:
        cluster.destroy()

    def med(phase: str, stmt: str, i: int) -> float:
        return statistics.median(t[i] for t in times[phase][stmt])

    print(f"\n{args.rows} rows updated, {half} inserted; medians of {args.reps} runs")
    print("seconds (wall, backend CPU) and their ratio to the first phase")
    print(
        f"{'phase':<10}{'update':>8}{'ratio':>7}{'cpu':>8}{'ratio':>7}"
        f"{'insert':>9}{'ratio':>7}{'cpu':>8}{'ratio':>7}"
    )
    summary: dict[str, dict] = {}
    for phase in phases:
        row: dict = {}
        line = f"{phase:<10}"
        for stmt in ("update", "insert"):
            for i, what in enumerate(("wall", "cpu")):
                value, base = med(phase, stmt, i), med(phases[0], stmt, i)
                row[f"{stmt}_{what}_s"] = value
                row[f"{stmt}_{what}_ratio"] = value / base
                line += f"{value:>{9 if stmt == 'insert' and i == 0 else 8}.2f}{value / base:>7.2f}"
        row["runs"] = times[phase]
        if args.small:
            row["small_cpu_us"] = {n: statistics.median(v) for n, v in smalls[phase].items()}
        summary[phase] = row
        print(line)
    if args.small:
        print("\nbackend CPU µs per UPDATE statement of 1, 10, 100 rows (median of reps)")
        print(f"{'phase':<10}" + "".join(f"{f'{n} rows':>10}" for n in SMALL))
        for phase in phases:
            print(
                f"{phase:<10}"
                + "".join(f"{summary[phase]['small_cpu_us'][n]:>10.0f}" for n in SMALL)
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": args.rows, "reps": args.reps, **summary}, indent=2))


if __name__ == "__main__":
    main()
