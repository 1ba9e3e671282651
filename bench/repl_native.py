"""Native logical replication's catch-up, the anchor next to pgferry and Londiste.

On its own root + leaf pair (``wal_level = logical``, the same durability settings and seed
data): a publication of the four tables on the root, a subscription on the leaf that copies
them, then the catch-up phase of the other systems: the subscription disabled (its slot
keeps the WAL), the seed load for BACKLOG_S seconds, the subscription enabled, and the time
until the subscriber has confirmed the root's WAL position of the end of the load.
events/s = rows the load changed / that time.  Sequences are not replicated by it.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from psycopg import sql

from bench.repl_env import SCHEMA, TABLES, Pair, compare_sides, run_load, wait_for

PUBLICATION = "bench_pub"
SUBSCRIPTION = "bench_sub"


def _confirmed(pair: Pair, target: str) -> bool:
    """The subscription's walsender reports every change up to ``target`` applied."""
    return bool(
        pair.scalar(
            "root",
            "select coalesce(bool_and(replay_lsn >= %s::pg_lsn), false) from pg_stat_replication"
            " where application_name = %s",
            (target, SUBSCRIPTION),
        )
    )


def _wait_confirmed(pair: Pair, timeout: float, poll: float = 0.1) -> None:
    target = str(pair.scalar("root", "select pg_current_wal_lsn()"))
    wait_for(
        "subscriber to confirm the root's WAL", lambda: _confirmed(pair, target), timeout, poll
    )


def attach(pair: Pair, timeout: float) -> None:
    """Publication, subscription with its initial copy, and wait until it streams."""
    tables = sql.SQL(", ").join(sql.Identifier(SCHEMA, t) for t in TABLES)
    pair.conn("leaf").execute(sql.SQL("truncate {}").format(tables))
    pair.conn("root").execute(
        sql.SQL("create publication {} for table {}").format(sql.Identifier(PUBLICATION), tables)
    )
    pair.conn("leaf").execute(
        sql.SQL("create subscription {} connection {} publication {}").format(
            sql.Identifier(SUBSCRIPTION),
            sql.Literal(pair.dsn("root")),
            sql.Identifier(PUBLICATION),
        )
    )
    wait_for(
        "subscription tables ready",
        lambda: (
            pair.scalar(
                "leaf", "select count(*) filter (where srsubstate = 'r') from pg_subscription_rel"
            )
            == len(TABLES)
        ),
        timeout,
    )
    _wait_confirmed(pair, timeout)


def catch_up(pair: Pair, backlog_s: int, timeout: float, outdir: Path) -> dict:
    """Disable, load, enable, time until the subscriber confirmed the end of the load."""
    sub = sql.Identifier(SUBSCRIPTION)
    leaf = pair.conn("leaf")
    leaf.execute(sql.SQL("alter subscription {} disable").format(sub))
    wait_for(
        "apply worker to stop",
        lambda: (
            not pair.scalar(
                "root",
                "select count(*) from pg_stat_replication where application_name = %s",
                (SUBSCRIPTION,),
            )
        ),
        60,
    )
    load = run_load(pair, backlog_s, outdir, "native_backlog")
    target = str(pair.scalar("root", "select pg_current_wal_lsn()"))
    t0 = time.monotonic()
    leaf.execute(sql.SQL("alter subscription {} enable").format(sub))
    wait_for("native catch-up", lambda: _confirmed(pair, target), timeout, poll=0.1)
    elapsed = time.monotonic() - t0
    return {
        "load": load,
        "source_tps": load["tps"],
        "backlog_events": load["events"],
        "catchup_s": round(elapsed, 3),
        "events_per_s": round(load["events"] / elapsed, 1),
        "check": compare_sides(pair),
    }


def detach(pair: Pair) -> None:
    pair.conn("leaf").execute(
        sql.SQL("drop subscription if exists {}").format(sql.Identifier(SUBSCRIPTION))
    )


def run_native(args, workroot: Path) -> dict:
    """The native system's part of a run: only the catch-up phase (the others have no
    counterpart measured here)."""
    from bench.repl_env import load_seed, make_pair

    result: dict = {"phases": {}}
    workdir = workroot / "native"
    print("[native] clusters and seed data", flush=True)
    pair = make_pair(
        "native", workdir, durable=not args.fast_clusters, extra={"wal_level": "logical"}
    )
    outdir = workdir / "out"
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        result["seed_rows"] = load_seed(pair, args.base_rows, args.log_rows)
        attach(pair, args.catchup_timeout)
        print("[native] catchup", flush=True)
        t0 = time.monotonic()
        res = catch_up(pair, args.backlog_s, args.catchup_timeout, outdir)
        res["phase_wall_s"] = round(time.monotonic() - t0, 1)
        result["phases"]["catchup"] = res
        print(
            f"[native] catchup: catchup_s={res['catchup_s']} events_per_s={res['events_per_s']}"
            f" equal={res['check']['equal']}",
            flush=True,
        )
        detach(pair)
    except Exception as exc:  # the other systems' figures stay
        result["error"] = f"{exc.__class__.__name__}: {str(exc).splitlines()[0]}"
        print(f"[native] FAILED: {result['error']}", flush=True)
    finally:
        if args.keep:
            pair.close()
        else:
            with contextlib.suppress(Exception):  # the clusters go anyway
                detach(pair)
            pair.destroy()
    return result
