"""Capture overhead: seed workload tps without triggers, with pgferry's and Londiste's triggers.

Runs on a throw-away cluster (PostgreSQL's default durability settings, as in the Londiste
anchor run): the walkthrough's tables with 200k users, then ``login.sql`` and ``logout.sql``
with 2 pgbench clients each, concurrently, once per phase: no triggers, pgferry capture
triggers (``ferry_queue.attach_capture``: the plain capture in C where the server has it, else
PL/pgSQL; the run prints which), Londiste's C triggers (``pgq.logutriga`` row
trigger + ``pgq.sqltriga`` truncate trigger, as ``londiste add-table`` creates them), and
pgferry's triggers with capture options (``ferry_queue.attach_capture_spec``): ``ignore``
leaves a column of each table out (:data:`IGNORED`), ``when`` captures only rows where
``userid > 0`` (every row: what it costs to test the condition, the same events queued),
and ``statement``: pgferry's statement triggers (``capture=statement``) instead of the
plain row trigger ``attach_capture`` makes.
Phases are interleaved in a rotating order and repeated, so that background load hits all
of them alike; a ticker thread ticks both queues every second, as pgqd or the pgferry
ticker would.  With ``--rows N`` each phase also times, after its pgbench run, one INSERT
of N rows into ``user_login_rec`` and one UPDATE of N ``user_session`` rows (server time
per row, the best of the repetitions: the least disturbed by other load).

    .venv/bin/python -m bench.capture_overhead [--seconds 30] [--reps 3] [--fast]
        [--phases none,pgferry,londiste,ignore,when,statement] [--rows 100000]

Needs pgbench and the pgq extension (``apt-get install postgresql-15-pgq3``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path

import psycopg

from pgferry import schema
from pgferry.testing.cluster import LocalCluster, make_cluster

SEED = Path("/work/shared/anchors/londiste/sql")
HERE = Path(__file__).resolve().parent
TABLES = ("user_info", "user_session", "user_login_rec", "user_logout_rec")
QUEUE = "replika"
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
PHASES = ("none", "pgferry", "londiste")
ALL_PHASES = (*PHASES, "ignore", "when", "statement")
# The capture options of the phases "ignore" and "when", per table: (key, ignored column).
KEYS = {"user_info": "userid", "user_session": "userid", "user_login_rec": "id",
        "user_logout_rec": "id"}  # fmt: skip
IGNORED = {"user_info": "mod_time", "user_session": "online_interval", "user_login_rec": "ip",
           "user_logout_rec": "ip"}  # fmt: skip

LOAD_SQL = """
insert into digoal_01.user_info
  select g, 'digoal.zhou', '德哥', 'DBA', '1970-01-01',
         '公益是一辈子的事, I''m Digoal.Zhou, Just do it!', 'digoal@126.com', 276732431,
         clock_timestamp(), null
  from generate_series(1, 200000) g;
insert into digoal_01.user_session (userid) select g from generate_series(1, 200000) g;
"""


def setup(cluster: LocalCluster, seed: Path, pgq: bool) -> str:
    connstr = cluster.createdb("digoal_01")
    with psycopg.connect(connstr, autocommit=True) as conn:
        conn.execute((seed / "schema.sql").read_text())  # type: ignore[arg-type]
        conn.execute(LOAD_SQL)  # type: ignore[arg-type]
        conn.execute("alter database digoal_01 set search_path = digoal_01, public")
        conn.execute("vacuum analyze")
        if pgq:  # only the phase "londiste" needs the extension
            conn.execute("create extension pgq")
            conn.execute("select pgq.create_queue(%s)", (QUEUE,))
    with psycopg.connect(connstr) as conn:
        schema.install(conn, ("queue",))
    with psycopg.connect(connstr, autocommit=True) as conn:
        conn.execute("select ferry_queue.create_queue(%s)", (QUEUE,))
    return connstr


def set_triggers(connstr: str, phase: str) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        for table in TABLES:
            name = f"digoal_01.{table}"
            conn.execute("select ferry_queue.detach_capture(%s, %s)", (QUEUE, name))
            for trigger in (f"_londiste_{QUEUE}", f"_londiste_{QUEUE}_truncate"):
                conn.execute(f"drop trigger if exists {trigger} on {name}")  # type: ignore[arg-type]
            if phase == "pgferry":
                conn.execute("select ferry_queue.attach_capture(%s, %s)", (QUEUE, name))
            elif phase in ("ignore", "when"):
                spec: dict = {"key": [KEYS[table]]}
                if phase == "ignore":
                    spec["ignore"] = [IGNORED[table]]
                else:
                    spec["when"] = "userid > 0"
                conn.execute(
                    "select ferry_queue.attach_capture_spec(%s, %s, %s)",
                    (QUEUE, name, json.dumps(spec)),
                )
            elif phase == "statement":
                conn.execute(
                    "select ferry_queue.attach_capture_spec(%s, %s, %s)",
                    (QUEUE, name, json.dumps({"key": [KEYS[table]], "capture": "statement"})),
                )
            elif phase == "londiste":
                conn.execute(
                    f"create trigger _londiste_{QUEUE} after insert or update or delete"  # type: ignore[arg-type]
                    f" on {name} for each row execute procedure pgq.logutriga('{QUEUE}')"
                )
                conn.execute(
                    f"create trigger _londiste_{QUEUE}_truncate after truncate"  # type: ignore[arg-type]
                    f" on {name} for each statement execute procedure pgq.sqltriga('{QUEUE}')"
                )
        conn.execute("checkpoint")


def capture_function(connstr: str) -> str:
    """The function of the first table's row capture trigger."""
    with psycopg.connect(connstr) as conn:
        row = conn.execute(
            "select tgfoid::regproc::text from pg_trigger"
            " where tgrelid = %s::regclass and tgname = %s",
            (f"digoal_01.{TABLES[0]}", f"_ferry_{QUEUE}_capture"),
        ).fetchone()
    return row[0] if row else "(no trigger)"


def ticker(connstr: str, stop: threading.Event, pgq: bool) -> None:
    with psycopg.connect(connstr, autocommit=True) as conn:
        while not stop.wait(1.0):
            if pgq:
                conn.execute("select pgq.ticker()")
            conn.execute("select ferry_queue.ticker()")


def pgbench_binary(cluster: LocalCluster) -> str:
    for candidate in (cluster.bindir / "pgbench", Path("/usr/lib/postgresql/15/bin/pgbench")):
        if candidate.exists():
            return str(candidate)
    found = shutil.which("pgbench")
    if found is None:
        raise SystemExit("pgbench not found (apt-get install postgresql-client)")
    return found


def pgbench(cluster: LocalCluster, script: Path, seconds: int, clients: int) -> subprocess.Popen:
    cmd = [
        pgbench_binary(cluster),
        "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
        "-M", "prepared", "-n", "-c", str(clients), "-j", str(clients),
        "-T", str(seconds), "-f", str(script), "digoal_01",
    ]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)


def run_phase(cluster: LocalCluster, seed: Path, seconds: int, clients: int) -> float:
    procs = [pgbench(cluster, seed / f, seconds, clients) for f in ("login.sql", "logout.sql")]
    total = 0.0
    for proc in procs:
        out, _ = proc.communicate()
        match = _TPS.search(out)
        if proc.returncode != 0 or match is None:
            raise SystemExit(f"pgbench failed:\n{out}")
        total += float(match.group(1))
    return total


def per_row(connstr: str, rows: int) -> tuple[float, float]:
    """µs per row of one INSERT of ``rows`` rows and one UPDATE of as many (autocommit)."""
    with psycopg.connect(connstr, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(
            "insert into digoal_01.user_login_rec (userid, login_time, ip)"
            " select g, now(), '10.0.0.1' from generate_series(1, %s) g",
            (rows,),
        )
        inserted = time.perf_counter()
        conn.execute(
            "update digoal_01.user_session set logintime = now(), login_count = login_count + 1"
            " where userid <= %s",
            (rows,),
        )
        updated = time.perf_counter()
    return 1e6 * (inserted - started) / rows, 1e6 * (updated - inserted) / rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--seed", type=Path, default=SEED)
    parser.add_argument("--fast", action="store_true", help="fsync/synchronous_commit off")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "capture_overhead.json")
    parser.add_argument("--rows", type=int, default=0, help="also time N-row statements")
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"comma separated, the first is the base of the shares (of {', '.join(ALL_PHASES)})",
    )
    args = parser.parse_args()
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = [p for p in phases if p not in ALL_PHASES]
    if unknown or not phases:
        parser.error(f"--phases: unknown phase {', '.join(unknown) or '(none given)'}")

    cluster = make_cluster("bench", **({} if args.fast else DURABLE))
    stop = threading.Event()
    results: dict[str, list[float]] = {p: [] for p in phases}
    row_times: dict[str, list[tuple[float, float]]] = {p: [] for p in phases}
    try:
        pgq = "londiste" in phases
        connstr = setup(cluster, args.seed, pgq)
        tick_thread = threading.Thread(target=ticker, args=(connstr, stop, pgq), daemon=True)
        tick_thread.start()
        for rep in range(args.reps):
            # Rotate the order each rep: no phase always runs first or after another.
            order = phases[rep % len(phases) :] + phases[: rep % len(phases)]
            for phase in order:
                set_triggers(connstr, phase)
                if phase == "pgferry" and rep == 0:
                    print(f"pgferry captures with {capture_function(connstr)}", flush=True)
                tps = run_phase(cluster, args.seed, args.seconds, args.clients)
                results[phase].append(tps)
                print(f"rep {rep + 1} {phase:<9} {tps:9.1f} tps", flush=True)
                if args.rows:
                    row_times[phase].append(per_row(connstr, args.rows))
        with psycopg.connect(connstr) as conn:
            events = conn.execute(
                "select (select count(*) from ferry_queue.event),"
                + (" (select count(*) from pgq.event_template)" if pgq else " null")
            ).fetchone()
    finally:
        stop.set()
        cluster.destroy()

    base = statistics.median(results[phases[0]])
    summary = {
        phase: {
            "median_tps": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "share": statistics.median(values) / base,
            "runs": values,
        }
        for phase, values in results.items()
    }
    print(f"\n{'phase':<10}{'median tps':>12}{'min':>10}{'max':>10}{'share':>8}")
    for phase, row in summary.items():
        print(
            f"{phase:<10}{row['median_tps']:>12.1f}{row['min']:>10.1f}{row['max']:>10.1f}"
            f"{row['share']:>8.3f}"
        )
    rows_summary = {}
    if args.rows:
        print(f"\n{'phase':<10}{'insert µs/row':>15}{'update µs/row':>15}   (best of {args.reps})")
        for phase, times in row_times.items():
            best = (min(t[0] for t in times), min(t[1] for t in times))
            rows_summary[phase] = {"insert_us": best[0], "update_us": best[1], "runs": times}
            print(f"{phase:<10}{best[0]:>15.1f}{best[1]:>15.1f}")
    ours, theirs = events if events else ("?", "?")
    print(f"events captured: pgferry {ours}, pgq {theirs}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    settings = "fast (fsync off)" if args.fast else "durable (PostgreSQL defaults)"
    args.json.write_text(
        json.dumps(
            {
                "settings": settings,
                "seconds": args.seconds,
                "reps": args.reps,
                **summary,
                "per_row": {"rows": args.rows, **rows_summary},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
