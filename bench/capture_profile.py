"""Where a captured event's time goes, and what a shorter row image would save.

Capture overhead (``capture_overhead.py``) is a share of tps; this script takes it apart.
On one throw-away cluster with ``fsync``, ``synchronous_commit`` and ``full_page_writes``
off (server CPU only, no wait for the disk), the walkthrough's tables with 200,000 users,
it times one UPDATE of N ``user_session`` rows and one INSERT of N ``user_login_rec`` rows
(server time per row, median of the repetitions) under these capture triggers:

* ``none``: no trigger;
* ``empty``: a PL/pgSQL row trigger that returns at once (what calling one costs);
* ``no-image``: pgferry's capture function with ``null`` instead of the row image (the
  event row, its sequence value and index entry, without building the image);
* ``json``: pgferry's capture function as shipped (``row_to_json(new)::text``);
* ``record``: the same with the row's text form (``new::text``), the shortest image that
  still holds every column.

Then, for N update events of each form, the provider's decode and collapse in the shape
replay's reads have (the image decoded once per event, ``DISTINCT ON`` the key, binary
``COPY`` out), per event.

    .venv/bin/python -m bench.capture_profile [--rows 100000] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from psycopg import sql

from bench import capture_overhead as co
from pgferry.testing.cluster import make_cluster

FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
VARIANTS = ("none", "empty", "no-image", "json", "record")
IMAGE = ("row_to_json(new)::text", "row_to_json(old)::text")

# The replay's own query shape: the image decoded once per event in a LATERAL item, the
# last image per key kept, the rows sent as binary COPY.
DECODE = {
    "json": """
        copy (select distinct on (r.userid) r.userid, r.logintime, r.login_count,
                     r.logouttime, r.online_interval
                from profile_events e
                cross join lateral json_populate_record(
                    null::digoal_01.user_session, e.ev_data::json) as r
               order by r.userid, e.ev_id desc) to stdout (format binary)""",
    "record": """
        copy (select distinct on ((s.r).userid) (s.r).userid, (s.r).logintime,
                     (s.r).login_count, (s.r).logouttime, (s.r).online_interval
                from profile_events e
                cross join lateral (select e.ev_data::digoal_01.user_session as r
                                    offset 0) s
               order by (s.r).userid, e.ev_id desc) to stdout (format binary)""",
}


def capture_functions(conn: psycopg.Connection) -> list[tuple[str, str]]:
    return conn.execute(
        "select p.proname, p.prosrc from pg_proc p"
        " join pg_namespace n on n.oid = p.pronamespace"
        " where n.nspname = 'ferry_queue' and p.proname ~ '^capture_[0-9]+_[0-9]+$'"
    ).fetchall()


def set_variant(conn: psycopg.Connection, connstr: str, variant: str) -> None:
    co.set_triggers(connstr, "none" if variant in ("none", "empty") else "pgferry")
    if variant == "empty":
        for table in ("user_session", "user_login_rec"):
            conn.execute(
                sql.SQL(
                    "create trigger profile_empty after insert or update or delete on {}"
                    " for each row execute function public.profile_empty()"
                ).format(sql.Identifier("digoal_01", table))
            )
        return
    conn.execute("drop trigger if exists profile_empty on digoal_01.user_session")
    conn.execute("drop trigger if exists profile_empty on digoal_01.user_login_rec")
    replacement = {"no-image": ("null", "null"), "record": ("new::text", "old::text")}
    for name, src in capture_functions(conn):
        for old, new in zip(IMAGE, replacement.get(variant, IMAGE), strict=True):
            src = src.replace(old, new)
        conn.execute(
            sql.SQL(
                "create or replace function ferry_queue.{}() returns trigger language plpgsql as {}"
            ).format(sql.Identifier(name), sql.Literal(src))
        )


def timed(conn: psycopg.Connection, query: str) -> float:
    started = time.perf_counter()
    if query.lstrip().startswith("copy"):
        with conn.cursor() as cur, cur.copy(query) as rows:  # type: ignore[arg-type]
            for _chunk in rows:
                pass
    else:
        conn.execute(query)  # type: ignore[arg-type]
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    n = args.rows
    cluster = make_cluster("capture-profile", **FAST)
    try:
        connstr = co.setup(cluster, co.SEED)
        with psycopg.connect(connstr, autocommit=True) as conn:
            conn.execute(
                "create function public.profile_empty() returns trigger language plpgsql"
                " as 'begin return null; end'"
            )
            times: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
            for rep in range(args.reps):
                for variant in VARIANTS[rep % len(VARIANTS) :] + VARIANTS[: rep % len(VARIANTS)]:
                    set_variant(conn, connstr, variant)
                    conn.execute("truncate ferry_queue.event")
                    conn.execute("vacuum digoal_01.user_session")
                    update = timed(
                        conn,
                        "update digoal_01.user_session set login_count = login_count + 1,"
                        f" logintime = now() where userid <= {n}",
                    )
                    insert = timed(
                        conn,
                        "insert into digoal_01.user_login_rec (userid, login_time, ip)"
                        f" select g, now(), '127.0.0.1' from generate_series(1, {n}) g",
                    )
                    times[variant].append((update, insert))
            print(f"server time per row, median of {args.reps} ({n:,} rows each)")
            print(f"{'trigger':<10} {'update µs':>10} {'insert µs':>10}")
            for variant in VARIANTS:
                upd = statistics.median(u for u, _ in times[variant]) / n * 1e6
                ins = statistics.median(i for _, i in times[variant]) / n * 1e6
                print(f"{variant:<10} {upd:>10.2f} {ins:>10.2f}")
            print("\nrow image length (bytes, average) and provider decode + collapse per event")
            for form in ("json", "record"):
                set_variant(conn, connstr, form)
                conn.execute("truncate ferry_queue.event")
                conn.execute(
                    "update digoal_01.user_session set login_count = login_count + 1,"
                    f" logintime = now(), logouttime = now() where userid <= {n}"
                )
                conn.execute("drop table if exists profile_events")
                conn.execute(
                    "create table profile_events as select ev_id, ev_data"
                    " from ferry_queue.event where ev_extra1 = 'digoal_01.user_session'"
                )
                conn.execute("vacuum analyze profile_events")
                length = conn.execute("select avg(length(ev_data)) from profile_events")
                decode = statistics.median(timed(conn, DECODE[form]) for _ in range(args.reps))
                print(
                    f"{form:<10} {float(length.fetchone()[0]):>6.1f} bytes"  # type: ignore[index]
                    f" {decode / n * 1e6:>8.2f} µs/event"
                )
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
