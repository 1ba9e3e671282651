"""Soak test: rounds of random faults under load, each ending with every node equal.

    .venv/bin/python tools/soak.py --rounds 50 [--seed N] [--keep] [--setting KEY=VALUE]

Starts two throw-away clusters (root; both leaves on the second), then per round: load on,
one random fault (worker SIGKILL, subscriber or provider server stopped -m fast/immediate,
ticker stopped, a backlog, a resync killed mid-copy, a worker SIGKILLed that `status` must
call down with exit 1, a column renamed and back under capture-ddl while both leaves are
stopped behind, a branch taking over the branch the Delta and Iceberg leaves read from with
``takeover --all``, the provider failing over to an asynchronous standby that lacks its last
commits), load off, wait until every replicated table equals its source (the lake
leaves' tables read directly; after a takeover ``pgferry compare`` on each lake leaf too,
whose difference is a failure).  Prints how many faults of each kind were injected and how
many rounds ended equal; exits non-zero if any round did not, or if a fault found something
else wrong (status blind to a dead worker, a row the failover lost that a leaf did not
list).  ``--fault NAME`` (repeatable) draws from those faults only; when provider_failover
is among them the root's cluster runs with a streaming standby (a third cluster) and the
daemons reach it through a connect string naming both servers with
target_session_attrs=read-write.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from pgferry.testing.cluster import make_cluster
from pgferry.testing.faults import Faults
from pgferry.testing.scenario import Load, Scenario


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--load-seconds", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=300.0, help="per round catch-up")
    parser.add_argument("--keep", action="store_true", help="keep clusters and logs")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more setting of every job's ini (repeatable)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=[name.removeprefix("fault_") for name in Faults.FAULTS],
        help="draw only from these faults (repeatable; default: all)",
    )
    args = parser.parse_args()
    faults = [f"fault_{name}" for name in args.fault] or list(Faults.FAULTS)
    rng = random.Random(args.seed)
    root = make_cluster("soak-root")
    sub = make_cluster("soak-sub")
    workdir = Path(tempfile.mkdtemp(prefix="pgferry-soak-"))
    lines = [s.replace("=", " = ", 1) for s in args.setting]
    ha_root = any(fault in Faults.HA_FAULTS for fault in faults)
    scenario = Scenario(root, sub, workdir, settings=lines, ha_root=ha_root)
    injected = Faults(scenario)
    equal_rounds = 0
    kinds: Counter[str] = Counter()
    print(f"seed {args.seed}, work dir {workdir}", flush=True)
    try:
        scenario.setup()
        scenario.wait_synced()
        scenario.wait_equal()
        for number in range(1, args.rounds + 1):
            fault = rng.choice(faults)
            failures = len(scenario.failures)
            started = time.monotonic()
            with Load(scenario.src) as load:
                time.sleep(rng.uniform(0.2, args.load_seconds))
                what = injected.inject(fault, rng)
                time.sleep(rng.uniform(0.2, args.load_seconds))
            kinds[fault] += 1
            try:
                scenario.wait_synced(args.timeout)
                scenario.wait_equal(args.timeout)
                if fault == "fault_takeover_lake":  # compare as well (some 10 s a lake leaf)
                    scenario.lake_compare()
                equal_rounds += 1
                verdict = "equal"
            except AssertionError:
                verdict = "DIFFERENT: " + ", ".join(scenario.differences())
            lost = injected.check_failover()
            if lost:
                verdict += f" ({lost})"
            if len(scenario.failures) > failures:
                verdict += "; FAILED: " + "; ".join(scenario.failures[failures:])
            print(
                f"round {number}: {what}; {load.transactions} transactions; "
                f"{verdict} after {time.monotonic() - started:.1f} s",
                flush=True,
            )
    finally:
        scenario.shutdown()
        if not args.keep:
            sub.destroy()
            scenario.root_cluster.destroy()  # after failovers, the root's current primary
            if scenario.root_standby is not None:
                scenario.root_standby.destroy()
    print(f"faults injected: {sum(kinds.values())} ({dict(kinds)})")
    print(f"rounds ended equal: {equal_rounds} of {args.rounds}")
    if ha_root:
        print(
            f"provider failovers: {injected.failovers}; rows the leaves held and the new"
            f" primary lacked: {injected.rows_lost}, rows listed lost: {injected.rows_listed}"
        )
    print(f"other failures: {len(scenario.failures)}")
    return 0 if equal_rounds == args.rounds and not scenario.failures else 1


if __name__ == "__main__":
    sys.exit(main())
