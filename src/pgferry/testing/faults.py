"""The faults a DBA meets in practice, injected into a running :class:`~.scenario.Scenario`.

Each ``fault_*`` method does one thing to the scenario's servers or daemons while its load
runs (a worker SIGKILLed, a server stopped fast or immediate, the ticker stopped, a backlog,
a resync killed mid-copy, a worker that ``status`` must call down, a column renamed to and
fro under capture-ddl, a lake leaves' branch taken over, the provider failing over to a
standby that lacks its last commits) and returns one line saying what it did.  What a fault
finds wrong besides the tables goes into the scenario's ``failures``; the caller then waits
until every replicated table equals its source (``Scenario.wait_equal``).  After a provider
failover, :meth:`Faults.check_failover` checks that every row lost is listed as lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import time
from functools import partial

import psycopg
from psycopg import sql as q

from pgferry.node import worker_health
from pgferry.testing.cluster import LocalCluster
from pgferry.testing.commands import run_pgferry
from pgferry.testing.scenario import (
    BRANCHES,
    EXCEPTION_SLEEP,
    LAKES,
    PARTIAL,
    TABLES,
    Scenario,
    sql,
    wait_until,
)
from pgferry.testing.standby import rebuild_as_standby

log = logging.getLogger(__name__)

TAKEOVER_ATTEMPTS = 5
KEYS = {"digoal_01.user_info": "userid", "digoal_01.user_session": "userid",
        "digoal_01.user_login_rec": "id"}  # fmt: skip
# The column the rename fault renames to and fro: the load never names it (its statements
# run under either name), and every row holds a value in it.
RENAMED = ("digoal_01.user_info", "engname", "engname1")
# How long status may take to call a killed worker down, beyond the rule's own wait
# (exception_sleep + worker_health.DOWN_MARGIN): each look runs the command line.
STATUS_SLACK = 30.0


class Faults:
    """The faults of one scenario, and what they left to check."""

    def __init__(self, scenario: Scenario) -> None:
        self.s = scenario
        self.faults: list[str] = []  # what each injected fault did, in order
        self.capture_ddl = False
        self.next_userid = 1_000_000  # rows the rename fault inserts, above the load's keys
        self.failovers = 0
        self.rows_lost = 0  # rows the leaves held that the promoted standby lacked, in all
        self.rows_listed = 0  # rows the leaves saved in ferry_node.lost_after_failover
        # After a failover, until the round ends: the rows lost (leaf, table, key) and the
        # last lost_after_failover id of each leaf before it.
        self.failover_pending: tuple[set[tuple[str, str, str]], dict[str, int]] | None = None

    def fault_kill_worker(self, rng: random.Random) -> str:
        job = rng.choice(self.s.JOBS[1:])
        time.sleep(rng.uniform(0.0, 1.5))
        pid = self.s.pid(job)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: self.s.pid(job) is None, 30, f"{job} to die")
        self.s.start(job)
        return f"SIGKILL {job}"

    def fault_restart_subscriber(self, rng: random.Random) -> str:
        return self._restart(self.s.sub_cluster, "subscriber", rng)

    def fault_restart_provider(self, rng: random.Random) -> str:
        return self._restart(self.s.root_cluster, "provider", rng)

    @staticmethod
    def _restart(cluster: LocalCluster, role: str, rng: random.Random) -> str:
        mode = rng.choice(("fast", "immediate"))
        cluster.stop(mode)
        time.sleep(rng.uniform(0.5, 2.0))
        cluster.start()
        return f"{role} server stopped -m {mode}"

    def fault_stop_ticker(self, rng: random.Random) -> str:
        self.s.stop("pgqd")
        time.sleep(rng.uniform(1.0, 3.0))
        self.s.start("pgqd")
        return "ticker stopped"

    def fault_backlog(self, rng: random.Random) -> str:
        self.s.stop("dst1_digoal_01")
        time.sleep(rng.uniform(2.0, 5.0))
        self.s.start("dst1_digoal_01")
        return "backlog on dst1"

    def fault_resync(self, rng: random.Random) -> str:
        table = rng.choice(TABLES)
        self.s.cli("dst1_digoal_01.ini", "resync", table)
        time.sleep(rng.uniform(0.0, 1.0))
        pid = self.s.pid("dst1_digoal_01")  # kill during (or right after) the copy
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: self.s.pid("dst1_digoal_01") is None, 30, "dst1 to die")
        self.s.start("dst1_digoal_01")
        return f"resync {table} + SIGKILL during copy"

    def fault_kill_seen_by_status(self, rng: random.Random) -> str:
        """A worker SIGKILLed; ``status`` must call it down (exit 1) within the rule's wait
        and a margin, and stop calling it down once it runs again."""
        job = rng.choice(self.s.JOBS[1:])
        pid = self.s.pid(job)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: self.s.pid(job) is None, 30, f"{job} to die")
        killed = time.monotonic()
        bound = EXCEPTION_SLEEP + worker_health.DOWN_MARGIN + STATUS_SLACK
        try:
            wait_until(lambda: self.s.worker_down(job), bound, f"status to call {job} down")
            seen = f"status: down after {time.monotonic() - killed:.1f} s"
        except AssertionError:
            seen = "status: NOT down"
            self.s.failures.append(f"status did not call the killed worker of {job} down"
                                 f" within {bound:.0f} s")  # fmt: skip
        self.s.start(job)
        try:
            wait_until(lambda: not self.s.worker_down(job), 60, f"status to see {job} again")
        except AssertionError:
            self.s.failures.append(f"status still calls the worker of {job} down after its restart")
        return f"SIGKILL {job}, {seen}"

    def _renamed_writes(self, column: str, step: int) -> None:
        """Rows written under the column's current name: inserts of new users and an update
        of the column in a slice of the old ones (the partial leaf's among them)."""
        table = q.Identifier(*RENAMED[0].split("."))
        col = q.Identifier(column)
        with psycopg.connect(self.s.src, autocommit=True) as conn:
            for _ in range(10):
                with conn.transaction():
                    conn.execute(
                        q.SQL(
                            "insert into {} (userid, {}, mod_time) values (%s, %s, now())"
                        ).format(table, col),
                        (self.next_userid, f"r{self.next_userid}.{step}"),
                    )
                self.next_userid += 1
            conn.execute(
                q.SQL("update {} set {} = {} || %s where userid %% 17 = %s").format(
                    table, col, col
                ),
                (f"+{step}", step % 17),
            )

    def _next_tick(self) -> None:
        """Wait for a tick after now on the root, so what came before is a batch of its own."""
        query = "select last_tick_id from ferry_queue.get_queue_info('replika')"
        before = sql(self.s.src, query)[0][0]
        wait_until(lambda: sql(self.s.src, query)[0][0] > before, 30, "the next tick")

    def fault_rename_under_load(self, rng: random.Random) -> str:
        """With capture-ddl on, the leaves stopped behind while the load writes: a column
        renamed and back a few times, rows written under each name; then they catch up."""
        if not self.capture_ddl:
            self.s.cli("src_digoal_01.ini", "capture-ddl", "on")
            self.capture_ddl = True
        for job in self.s.JOBS[1:]:
            self.s.stop(job)
        table, first, second = RENAMED
        ident = q.Identifier(*table.split("."))
        renames = rng.choice((2, 4, 6))
        names = (first, second)
        for step in range(renames):
            old, new = names[step % 2], names[(step + 1) % 2]
            self._renamed_writes(old, step)
            self._next_tick()
            rename = q.SQL("alter table {} rename column {} to {}")
            sql(self.s.src, rename.format(ident, q.Identifier(old), q.Identifier(new)))
            self._next_tick()
        self._renamed_writes(first, renames)
        for job in self.s.JOBS[1:]:
            self.s.start(job)
        return f"{renames} renames of {table}.{first} with both leaves behind"

    def fault_takeover_lake(self, rng: random.Random) -> str:
        """The branch the lake leaves do not read from takes the other's place with
        ``takeover OLD --all`` under load: the lake leaves (a keyless table among theirs)
        and the old branch move under it.  Which branch reads from which alternates."""
        old = self.s.lake_provider
        new = next(b for b in BRANCHES if b != old)
        time.sleep(rng.uniform(0.0, 1.0))
        # Refused, nothing changed, when a lake leaf stands on a tick the new branch never
        # held (docs/nodes.md): run again, as the operator would.
        refused, out = 0, ""
        for _attempt in range(TAKEOVER_ATTEMPTS):
            proc = run_pgferry(f"{new}.ini", "takeover", old, "--all", "--timeout=120",
                               timeout=300, cwd=self.s.workdir)  # fmt: skip
            out = (proc.stdout + proc.stderr).strip()
            if proc.returncode == 0 or "nothing changed" not in out:
                break
            refused += 1
            time.sleep(rng.uniform(0.2, 1.0))
        where = [self._provider(lake) for lake in LAKES]
        if where == [new] * len(LAKES) and self._provider(old) == new:
            self.s.lake_provider = new
        elif refused == TAKEOVER_ATTEMPTS:
            self.s.failures.append(f"takeover of {old} by {new} refused {refused} times: {out}")
        else:
            self.s.failures.append(f"takeover of {old} by {new}: lake leaves under {where}: {out}")
        return f"{new} takes over {old} --all ({refused} refused first), lake leaves under {where}"

    def _provider(self, node: str) -> str | None:
        found = sql(self.s.nodes[node], "select provider_node from ferry_node.local_state")
        return found[0][0] if found else None

    def _last_tick(self) -> int:
        query = "select last_tick_id from ferry_queue.get_queue_info('replika')"
        return sql(self.s.src, query)[0][0]

    @staticmethod
    def _applied_tick(dsn: str) -> int:
        return sql(dsn, "select coalesce(max(tick_id), 0) from ferry_node.applied_tick")[0][0]

    @staticmethod
    def _last_listed(dsn: str) -> int:
        query = "select coalesce(max(lost_id), 0) from ferry_node.lost_after_failover"
        return sql(dsn, query)[0][0]

    def _held_not_on(self, dsn: str, leaves: list[str]) -> set[tuple[str, str, str]]:
        """Rows ``leaves`` hold that database ``dsn`` lacks or holds otherwise, by leaf,
        source table and key (as a row literal, like ferry_node.lost_after_failover's)."""
        pairs = [(self.s.dst1, t, t) for t in TABLES] + [(self.s.dst2, *p) for p in PARTIAL.items()]
        pairs = [pair for pair in pairs if pair[0] in leaves]
        lost = set()
        for leaf, source, dest in pairs:
            digest = "select row({})::text, md5(to_jsonb(t)::text) from {} t"
            key = q.Identifier(KEYS[source])
            theirs = dict(sql(dsn, q.SQL(digest).format(key, q.Identifier(*source.split(".")))))
            ours = sql(leaf, q.SQL(digest).format(key, q.Identifier(*dest.split("."))))
            lost |= {(leaf, source, k) for k, d in ours if theirs.get(k) != d}
        return lost

    def fault_provider_failover(self, rng: random.Random) -> str:
        """The root's primary dies (-m immediate) while its asynchronous standby, cut off a
        moment before, lacks its last commits, which the leaves applied; the standby is
        promoted and the dead primary copied again as the next standby.  The leaves must
        reconcile with the new root and list what it lost (see :meth:`check_failover`)."""
        standby = self.s.root_standby
        if standby is None:
            raise AssertionError("the provider failover fault needs the root on a standby pair")
        standby.wait_caught_up()
        standby.cut_off()
        # The root's next tick holds every commit the standby has: a leaf that applied it
        # holds all the standby holds, so a row that differs there is one the standby lost
        # (not one the leaf has yet to apply).
        self._next_tick()
        cut_tick = self._last_tick()
        time.sleep(rng.uniform(0.3, 1.5))  # a span of writes the standby will lack
        leaves = []
        for leaf in (self.s.dst1, self.s.dst2):
            # Not past the cut in time: the leaf loses nothing here, or is left unchecked.
            with contextlib.suppress(AssertionError):
                wait_until(partial(self._past, leaf, cut_tick), 30,
                           "the leaves to apply ticks the standby lacks")  # fmt: skip
            if self._applied_tick(leaf) >= cut_tick:
                leaves.append(leaf)
        old = self.s.root_cluster
        old.stop("immediate")
        # The primary gone, the leaves apply nothing more: what they hold now and the
        # standby (read in recovery, before its promotion) lacks is what the failover loses.
        lost = self._held_not_on(standby.connstr(self.s.dbname), leaves)
        marks = {dsn: self._last_listed(dsn) for dsn in (self.s.dst1, self.s.dst2)}
        standby.promote()
        self.s.root_cluster = standby.cluster
        self.failovers += 1
        self.s.root_standby = rebuild_as_standby(
            old, self.s.root_cluster, f"soak_standby_{self.failovers}"
        )
        self.failover_pending = (lost, marks)
        return f"provider failover, {len(lost)} rows held on the leaves lost, old primary rebuilt"

    def _past(self, leaf: str, tick: int) -> bool:
        return self._applied_tick(leaf) > tick

    def check_failover(self) -> str:
        """After the round of a provider failover: every row a leaf held that the promoted
        standby lacked must be listed in the leaf's ferry_node.lost_after_failover.  The
        listing may hold more: rows the new root changed before the leaf reconciled."""
        if self.failover_pending is None:
            return ""
        lost, marks = self.failover_pending
        self.failover_pending = None
        listed = set()
        query = "select table_name, row_key from ferry_node.lost_after_failover where lost_id > %s"
        for dsn, mark in marks.items():
            listed |= {(dsn, t.replace('"', ""), k) for t, k in sql(dsn, query, (mark,))}
        self.rows_lost += len(lost)
        self.rows_listed += len(listed)
        missing = lost - listed
        if missing:
            example = ", ".join(f"{t} {k}" for _, t, k in sorted(missing)[:3])
            self.s.failures.append(
                f"{len(missing)} rows lost in the failover not listed ({example})"
            )
        return f"{len(lost)} rows lost, {len(listed)} listed"

    FAULTS = (
        "fault_kill_worker",
        "fault_restart_subscriber",
        "fault_restart_provider",
        "fault_stop_ticker",
        "fault_backlog",
        "fault_resync",
        "fault_kill_seen_by_status",
        "fault_rename_under_load",
        "fault_takeover_lake",
        "fault_provider_failover",
    )
    # Faults that need the root on a primary and a standby (``ha_root``).
    HA_FAULTS = ("fault_provider_failover",)

    def inject(self, name: str, rng: random.Random) -> str:
        done = getattr(self, name)(rng)
        self.faults.append(done)
        log.info("fault: %s", done)
        return done
