"""Asynchronous provider failovers in a row under a write load, each ending with the leaf
equal to its new provider and the lost rows listed.

    .venv/bin/python tools/failover_rounds.py --rounds 20 [--lost-seconds 1.0]

A root on a primary with an asynchronous streaming standby (the nodes reach it through a
connect string naming both servers with target_session_attrs=read-write), a leaf on a
third cluster, the leaf's worker looping and a stand-in ticker, rows inserted all along.
Each round: the standby stops receiving WAL; the load goes on for ``--lost-seconds`` and
the leaf applies it; the primary dies (stop -m immediate) and the standby is promoted; the
load goes on against it; the dead primary is copied again as the new standby.  The round
ends when the leaf equals the new primary; it counts the rows the leaf saved as lost and
checks that they are exactly the rows the new primary lacks.  Prints one line per round
and the totals; exits 1 when a round did not end equal.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from psycopg import sql

from pgferry.testing.cascade import Cascade, sql_rows
from pgferry.testing.cluster import make_cluster
from pgferry.testing.load import Inserts
from pgferry.testing.scenario import wait_until
from pgferry.testing.standby import both_hosts, make_standby, rebuild_as_standby

TABLE = sql.Identifier("public", "orders")
CREATE = "create table public.orders (id bigint primary key, v text)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--lost-seconds", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    primary = make_cluster("fo-a")
    primary.createdb("shop")
    standby = make_standby(primary, "fo_b")
    leaf_cluster = make_cluster("fo-leaf")
    leaf_dsn = leaf_cluster.createdb("shop")
    root_dsn = both_hosts(primary, standby.cluster, "shop")
    cascade = Cascade("shop", Path(tempfile.mkdtemp(prefix="pgferry-failover-")))
    cascade.node("root", root_dsn, "root")
    cascade.node("leaf", leaf_dsn, "leaf", "root")
    for node in ("root", "leaf"):
        cascade.sql(node, CREATE)
        cascade.add(node, "public.orders")
    cascade.start("leaf")
    cascade.start_ticker()
    equal_rounds, total_lost, seconds = 0, 0, []
    try:
        for n in range(1, args.rounds + 1):
            load = Inserts([root_dsn], TABLE, n * 10_000_000, every=0.005)
            load.start()
            wait_until(lambda load=load: load.done >= 50, 60, "writes")
            standby.wait_caught_up()
            standby.cut_off()
            time.sleep(args.lost_seconds)  # a time span of writes, not a condition
            cascade.catch_up("leaf", timeout=args.timeout)  # the leaf applied them
            held = {r[0] for r in cascade.sql("leaf", "select id from public.orders")}
            started = time.monotonic()
            primary.stop("immediate")
            standby.promote()
            old, primary = primary, standby.cluster
            wait_until(lambda: _writes(root_dsn), 60, "the new primary")
            after = load.done
            wait_until(lambda load=load, after=after: load.done > after + 50, 60, "writes after")
            standby = rebuild_as_standby(old, primary, f"fo_{n}")
            load.stop()
            cascade.catch_up("leaf", timeout=args.timeout)
            seconds.append(time.monotonic() - started)
            root_rows = cascade.sql("root", "select id, v from public.orders order by id")
            leaf_rows = cascade.sql("leaf", "select id, v from public.orders order by id")
            on_root = {r[0] for r in root_rows}
            lacking = sorted(i for i in held if i not in on_root)
            listed = sorted(
                int(r[0])
                for r in cascade.sql(
                    "leaf",
                    "select held_here ->> 'id' from ferry_node.lost_after_failover"
                    " where on_provider is null",
                )
            )
            total_lost = len(listed)
            ok = root_rows == leaf_rows and set(lacking) <= set(listed)
            equal_rounds += ok
            print(
                f"round {n}: {'equal' if ok else 'DIFFERENT'}, {len(lacking)} rows lost,"
                f" listed {total_lost} in all, {seconds[-1]:.1f}s from the failover to equal",
                flush=True,
            )
    finally:
        cascade.close()
        for cluster in (primary, standby.cluster, leaf_cluster):
            cluster.destroy(background=True)
    if seconds:
        print(
            f"{equal_rounds}/{args.rounds} rounds equal; rows listed lost {total_lost};"
            f" failover to equal: median {sorted(seconds)[len(seconds) // 2]:.1f}s,"
            f" max {max(seconds):.1f}s"
        )
    return 0 if equal_rounds == args.rounds else 1


def _writes(dsn: str) -> bool:
    """Whether the side's primary accepts writes (the promoted standby)."""
    return bool(sql_rows(dsn, "select not pg_is_in_recovery()")[0][0])


if __name__ == "__main__":
    sys.exit(main())
