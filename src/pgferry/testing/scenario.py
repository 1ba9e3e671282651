"""A small replicated set-up on local clusters and a pgbench-like load; the faults injected
into it are :mod:`.faults`.

Used by the fault-injection test and by ``tools/soak.py``: a root database and two leaves
(one full copy, one partial renamed copy ``userid < 1000``) on a second cluster, two
branches there too, the first feeding a Delta and an Iceberg lake leaf (a keyed and a
keyless table), the ticker and the workers as ``-d`` daemons through the real command line,
a writer thread that survives server restarts. After each fault the caller waits until every
replicated table equals its source again. With ``ha_root`` the root's cluster runs with an
asynchronous streaming standby and every daemon reaches the root through a connect string
naming both servers, so that the provider can fail over.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import psycopg
from psycopg import conninfo
from psycopg import sql as q

from pgferry import polling
from pgferry.daemon import pid_alive, read_pid
from pgferry.errors import WaitTimeout
from pgferry.testing import load
from pgferry.testing.cluster import LocalCluster
from pgferry.testing.commands import run_pgferry
from pgferry.testing.standby import Standby, both_hosts, make_standby

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

ROWS = 2000
SCHEMA = """
create schema digoal_01;
create table digoal_01.user_info (userid int primary key, engname text, mod_time timestamp);
create table digoal_01.user_session (
    userid int primary key, logintime timestamp(0), login_count bigint default 0);
create table digoal_01.user_login_rec (
    id bigserial primary key, userid int, login_time timestamp, ip inet);
create table digoal_01.user_login_log (userid int, login_time timestamp, ip inet);
"""
FILL = f"""
insert into digoal_01.user_info select g, 'u' || g, now() from generate_series(1, {ROWS}) g;
insert into digoal_01.user_session (userid) select generate_series(1, {ROWS});
"""
TABLES = ("digoal_01.user_info", "digoal_01.user_session", "digoal_01.user_login_rec")
PARTIAL = {
    "digoal_01.user_info": "digoal_02.user_info1",
    "digoal_01.user_session": "digoal_02.user_session1",
}
CONDITION = "userid<1000"
# The lake side: two branches on the second cluster, one feeding two lake leaves (Delta and
# Iceberg) a keyed and a keyless table; the takeover fault moves the lake leaves between
# the branches with `takeover --all` under load.
KEYLESS = "digoal_01.user_login_log"
BRANCH_TABLES = ("digoal_01.user_session", "digoal_01.user_login_rec", KEYLESS)
LAKE_TABLES = ("digoal_01.user_session", KEYLESS)
BRANCHES = ("branch_a", "branch_b")
LAKES = {"lake_delta": "delta", "lake_iceberg": "iceberg"}
# The partial leaf takes one tick per batch when behind (the full leaf as many as fit in the
# default): a batch between two renames meets a provider whose catalog shows the later one.
SMALL_BATCHES = "pgq_batch_collect_events"
EXCEPTION_SLEEP = 1.0  # every job's: a killed worker counts as down 11 s after its heartbeat


def write_job_ini(workdir: Path, job: str, dsn: str, settings: str) -> None:
    """A node's ini in ``workdir``: job ``job`` on database ``dsn``, then ``settings``."""
    (workdir / f"{job}.ini").write_text(f"[londiste3]\njob_name = {job}\ndb = {dsn}\n{settings}")


def write_ticker_ini(workdir: Path, base_connstr: str, dbname: str) -> None:
    """The ticker's ini (pgqd.ini) in ``workdir``: database ``dbname`` of ``base_connstr``."""
    (workdir / "pgqd.ini").write_text(
        f"[pgqd]\nbase_connstr = {base_connstr}\n"
        f"database_list = {dbname}\nticker_period = 0.2\ncheck_period = 1\n"
        f"logfile = {workdir}/log/pgqd.log\npidfile = {workdir}/pid/pgqd.pid\n"
    )


def sql(dsn: str, query: str | q.Composable, params: tuple | None = None) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def _as_lake_text(value: object) -> str:
    """A PostgreSQL value as the text of its lake value: an inet is a string with its
    prefix length there (``10.0.0.2/32``)."""
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return ipaddress.ip_interface(value).with_prefixlen
    return str(value)


def process_running(pid: int) -> bool:
    """True while process ``pid`` runs.  An exited process not yet reaped (a zombie) has
    stopped: a detached daemon's parent is init, which here collects it only a second or two
    later, and its locks and connections are gone already."""
    if not pid_alive(pid):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: the signal check alone
    return state != "Z"


T = TypeVar("T")

# Polling intervals: a condition that holds soon is seen soon; a long wait polls no more
# often than every 0.3 s, as each look (a table digest, a query) costs the machine too.
FIRST_POLL = 0.05
LAST_POLL = 0.3


def backoff(first: float = FIRST_POLL, last: float = LAST_POLL) -> Callable[[float], None]:
    """A ``sleep`` for :func:`pgferry.polling.wait_until` whose pauses grow from ``first``
    to ``last`` (never past the deadline the poll loop passes it)."""
    pause = [first]

    def sleep(left: float) -> None:
        time.sleep(min(left, pause[0]))
        pause[0] = min(pause[0] * 1.5, last)

    return sleep


def wait_until(cond: Callable[[], T], timeout: float, what: str) -> T:
    """The tests' wait: :func:`pgferry.polling.wait_until` with growing pauses, a server
    being restarted counted as "not yet", and a failed assertion naming ``what`` on
    timeout.  Returns what ``cond`` returned."""

    def check() -> T | bool:
        try:
            return cond()
        except psycopg.OperationalError:
            return False  # a server being restarted

    try:
        return polling.wait_until(  # type: ignore[return-value]
            check, timeout=timeout, interval=LAST_POLL, what=what, sleep=backoff()
        )
    except WaitTimeout:
        raise AssertionError(f"timed out waiting for {what}") from None


class Steps(Protocol):
    def work(self) -> bool: ...


def step_until(worker: Steps, done: Callable[[], T], timeout: float, what: str) -> T:
    """Step ``worker`` (its loop's one pass, :meth:`pgferry.apply.worker.Worker.work`) in
    this thread until ``done()`` holds; it pauses only while the worker has nothing to do
    (copies run beside its loop).  A failed assertion names ``what`` on timeout."""
    worked = [False]

    def step() -> T:
        worked[0] = bool(worker.work())
        return done()

    def pause(left: float) -> None:
        if not worked[0]:
            time.sleep(min(left, 0.02))

    try:
        return polling.wait_until(step, timeout=timeout, what=what, sleep=pause)
    except WaitTimeout:
        raise AssertionError(f"timed out waiting for {what}") from None


class Load(load.Load):
    """Logins, logouts and log inserts on the source in a thread; reconnects after faults."""

    def __init__(self, dsn: str, pause: float = 0.002) -> None:
        rng = random.Random(7)

        def login(conn: psycopg.Connection, _done: int) -> None:
            uid = rng.randint(1, ROWS)
            conn.execute(
                "update digoal_01.user_session set logintime = now(),"
                " login_count = login_count + 1 where userid = %s",
                (uid,),
            )
            conn.execute(
                "insert into digoal_01.user_login_rec (userid, login_time, ip)"
                " values (%s, now(), '10.0.0.1')",
                (uid,),
            )
            conn.execute(
                "insert into digoal_01.user_login_log values (%s, now(), '10.0.0.2')", (uid,)
            )
            if uid % 13 == 0:
                conn.execute(
                    "update digoal_01.user_info set mod_time = now(),"
                    " userid = userid + %s where userid = %s",
                    (ROWS, uid),
                )

        super().__init__(dsn, login, every=pause, retry=0.5)  # the source is down: again

    @property
    def transactions(self) -> int:
        return self.done

    @property
    def failures(self) -> int:
        return self.refused


@dataclass
class Scenario:
    """Root on ``root_cluster``; leaves ``dst1`` (full) and ``dst2`` (partial) on ``sub``."""

    root_cluster: LocalCluster
    sub_cluster: LocalCluster
    workdir: Path
    src: str = ""
    dst1: str = ""
    dst2: str = ""
    settings: list[str] = field(default_factory=list)  # more ini lines of every job
    # What was found wrong besides the tables (a lake compare's exit; the faults' findings).
    failures: list[str] = field(default_factory=list)
    # The root's cluster is a primary with an asynchronous streaming standby (the provider
    # failover fault); root_cluster is always the side's current primary.
    ha_root: bool = False
    # The branches and lake leaves (the takeover fault's); without them a smaller set-up.
    lakes: bool = True
    dbname: str = "digoal_01"
    root_standby: Standby | None = None

    # The lake side (see BRANCHES): node name = job name = database name on sub_cluster.
    nodes: dict[str, str] = field(default_factory=dict)  # node -> dsn
    lake_provider: str = BRANCHES[0]  # the branch the lake leaves read from now

    JOBS = ("src_digoal_01", "dst1_digoal_01", "dst2_digoal_02")
    LAKE_JOBS = (*BRANCHES, *LAKES)

    # --- command line -----------------------------------------------------------------
    def cli(self, *args: str, check: bool = True) -> str:
        proc = run_pgferry(*args, timeout=300, cwd=self.workdir)
        if check and proc.returncode != 0:
            raise AssertionError(f"pgferry {' '.join(args)}: {proc.stdout}{proc.stderr}")
        return proc.stdout + proc.stderr

    def status(self, ini: str = "src_digoal_01.ini") -> tuple[int, dict]:
        """``status --json`` as a monitor runs it: its exit code and its report."""
        proc = run_pgferry(ini, "status", "--json", timeout=120, cwd=self.workdir)
        try:
            report = json.loads(proc.stdout)
        except ValueError as exc:
            raise AssertionError(f"pgferry status: {proc.stdout}{proc.stderr}") from exc
        return proc.returncode, report

    def worker_down(self, job: str) -> bool:
        """Whether status says the worker of node ``job`` is down (and exits 1 for it)."""
        code, report = self.status()
        node = next((n for n in report["nodes"] if n["name"] == job), None)
        return (
            code == 1
            and node is not None
            and node["worker_down"] is not None
            and f"worker of {job} down" in report["problems"]
        )

    def pid(self, job: str) -> int | None:
        pid = read_pid(self.workdir / "pid" / f"{job}.pid")
        return pid if pid is not None and process_running(pid) else None

    def start(self, job: str) -> None:
        if self.pid(job) is None:
            self.cli("-d", f"{job}.ini", "ticker" if job == "pgqd" else "worker")

    def stop(self, job: str) -> None:
        self.cli("-s", f"{job}.ini", "ticker" if job == "pgqd" else "worker", check=False)
        wait_until(lambda: self.pid(job) is None, 60, f"{job} to stop")

    # --- set-up -------------------------------------------------------------------------
    def setup(self, dbname: str = "digoal_01") -> None:
        self.dbname = dbname
        self.src = self.root_cluster.createdb(dbname)
        ticker_base = f"host=127.0.0.1 port={self.root_cluster.port} user=postgres"
        if self.ha_root:
            self.root_standby = make_standby(self.root_cluster, "soak_standby_0")
            self.src = both_hosts(self.root_cluster, self.root_standby.cluster, dbname)
            params = conninfo.conninfo_to_dict(self.src)
            del params["dbname"]  # the ticker names the database itself
            ticker_base = conninfo.make_conninfo("", **params)
        self.dst1 = self.sub_cluster.createdb("digoal_01")
        self.dst2 = self.sub_cluster.createdb("digoal_02")
        common = (
            f"queue_name = replika\nlogfile = {self.workdir}/log/%(job_name)s.log\n"
            f"pidfile = {self.workdir}/pid/%(job_name)s.pid\nloop_delay = 0.2\n"
            f"exception_sleep = {EXCEPTION_SLEEP:g}\nparallel_copies = 4\nlock_timeout = 120\n"
            "spark_master = local[1]\nspark.sql.shuffle.partitions = 2\n"
        ) + "".join(f"{line}\n" for line in self.settings)
        for job, dsn in zip(self.JOBS, (self.src, self.dst1, self.dst2), strict=True):
            own = ""
            if job == "dst2_digoal_02" and not any(
                line.split("=")[0].strip() == SMALL_BATCHES for line in self.settings
            ):
                own = f"{SMALL_BATCHES} = 1\n"
            write_job_ini(self.workdir, job, dsn, common + own)
        write_ticker_ini(self.workdir, ticker_base, dbname)
        sql(self.src, SCHEMA + FILL)
        sql(self.dst1, SCHEMA)
        sql(self.dst2, "create schema digoal_02")
        self.cli("src_digoal_01.ini", "create-root", "src_digoal_01", self.src)
        self.cli("dst1_digoal_01.ini", "create-leaf", "dst1_digoal_01", self.dst1,
                 f"--provider={self.src}")  # fmt: skip
        self.cli("dst2_digoal_02.ini", "create-leaf", "dst2_digoal_02", self.dst2,
                 f"--provider={self.src}")  # fmt: skip
        for job in ("pgqd", *self.JOBS):
            self.start(job)
        self.cli("src_digoal_01.ini", "add-table", *TABLES)
        self.cli("dst1_digoal_01.ini", "add-table", *TABLES)
        for table, dest in PARTIAL.items():
            self.cli("dst2_digoal_02.ini", "add-table", table, f"--dest-table={dest}",
                     f"--copy-condition={CONDITION}", "--create")  # fmt: skip
        if self.lakes:
            self.setup_lakes(common)

    def setup_lakes(self, common: str) -> None:
        """Two branches under the root on the second cluster, the lake leaves (Delta and
        Iceberg, each its own lake_path) under the first: the keyed user_session and the
        keyless user_login_log in the lake."""
        small = any(line.split("=")[0].strip() == SMALL_BATCHES for line in self.settings)
        sql(self.src, f"alter table {KEYLESS} replica identity full")
        self.cli("src_digoal_01.ini", "add-table", KEYLESS)
        for name in self.LAKE_JOBS:
            self.nodes[name] = self.sub_cluster.createdb(name)
            # The branches take one tick per batch (when behind too): a lake leaf then stands
            # on a tick the other branch holds as well, and can move under it.
            own = f"{SMALL_BATCHES} = 1\n" if name in BRANCHES and not small else ""
            if name in LAKES:
                lake = self.workdir / name
                lake.mkdir()
                # Compacted every 20 commits: a commit a tick makes many small files, and
                # the round's check reads the tables whole.
                own = (f"lake_path = {lake}\nlake_format = {LAKES[name]}\n"
                       "lake_compact_interval = 20\n")  # fmt: skip
            write_job_ini(self.workdir, name, self.nodes[name], common + own)
        for branch in BRANCHES:
            sql(self.nodes[branch], SCHEMA)
            self.cli(f"{branch}.ini", "create-branch", branch, self.nodes[branch],
                     f"--provider={self.src}")  # fmt: skip
            self.start(branch)
            self.cli(f"{branch}.ini", "add-table", *BRANCH_TABLES)
        for leaf in LAKES:
            sql(self.nodes[leaf], "create schema digoal_01")
            self.cli(f"{leaf}.ini", "create-leaf", leaf, self.nodes[leaf],
                     f"--provider={self.nodes[self.lake_provider]}")  # fmt: skip
            self.start(leaf)
            self.cli(f"{leaf}.ini", "add-table", *LAKE_TABLES, "--handler=lake", "--create")

    def shutdown(self) -> None:
        for job in (*reversed(self.LAKE_JOBS), *reversed(self.JOBS), "pgqd"):
            pid = self.pid(job)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)

    # --- checks -------------------------------------------------------------------------
    @staticmethod
    def _digest(dsn: str, table: str, cond: str = "true") -> list[tuple]:
        return sql(
            dsn,
            f"select count(*), md5(coalesce(string_agg(t::text, '|' order by t::text), ''))"
            f" from {table} t where {cond}",
        )

    def differences(self) -> list[str]:
        """Tables that differ from their source right now (empty when all equal)."""
        return [name for name, same in self._checks() if not same()]

    def equal(self) -> bool:
        """Whether every table equals its source right now: :meth:`differences` empty, but
        it stops at the first difference (a wait's "not yet" costs one cheap look, not a
        read of every lake table)."""
        return all(same() for _, same in self._checks())

    def _checks(self) -> Iterator[tuple[str, Callable[[], bool]]]:
        """Each replicated table's comparison with its source, named as :meth:`differences`
        names it, the cheap ones first: the digests PostgreSQL computes on the leaves and
        branches, then the lake tables, read whole.  The source is read once a pass."""
        digests: dict[tuple[str, str], list[tuple]] = {}
        texts: dict[str, list[tuple[str, ...]]] = {}

        def source(table: str, cond: str = "true") -> list[tuple]:
            if (table, cond) not in digests:
                digests[table, cond] = self._digest(self.src, table, cond)
            return digests[table, cond]

        def source_rows(table: str) -> list[tuple[str, ...]]:
            if table not in texts:
                texts[table] = self._rows(self.src, table)
            return texts[table]

        def same(table: str, dsn: str, dest: str | None = None, cond: str = "true") -> bool:
            return source(table, cond) == self._digest(dsn, dest or table)

        def lake_same(lake: str, table: str) -> bool:
            found = self._lake_table(lake, table)
            # The digest's count first: a lake behind is seen without a row turned to text.
            if found.num_rows != source(table)[0][0]:
                return False
            return source_rows(table) == self._lake_text(found)

        for table in TABLES:
            yield f"dst1 {table}", partial(same, table, self.dst1)
        for table, dest in PARTIAL.items():
            yield f"dst2 {dest}", partial(same, table, self.dst2, dest, CONDITION)
        if not self.lakes:
            return
        for branch in BRANCHES:
            for table in BRANCH_TABLES:
                yield f"{branch} {table}", partial(same, table, self.nodes[branch])
        for lake in LAKES:
            for table in LAKE_TABLES:
                yield f"{lake} {table}", partial(lake_same, lake, table)

    @staticmethod
    def _rows(dsn: str, table: str) -> list[tuple[str, ...]]:
        """The rows of ``table`` as text, sorted: a multiset the lake's can equal."""
        rows = sql(dsn, f"select * from {table}")
        return sorted(tuple(_as_lake_text(v) for v in row) for row in rows)

    def _lake_table(self, lake: str, table: str) -> pa.Table:
        """The lake leaf's table, read whole."""
        from pgferry.lake import delta, iceberg

        schema, name = table.split(".")
        root = self.workdir / lake
        if LAKES[lake] == "delta":
            return delta.rows_at(str(root / schema / name))
        return iceberg.catalog(str(root)).load_table((schema, name)).scan().to_arrow()

    @staticmethod
    def _lake_text(found: pa.Table) -> list[tuple[str, ...]]:
        """A lake table's rows as text, sorted, as :meth:`_rows` gives the source's."""
        return sorted(tuple(str(v) for v in row.values()) for row in found.to_pylist())

    def lake_compare(self) -> None:
        """``pgferry compare`` on each lake leaf (lake against its branch at one tick), as
        the check of a round that ended equal; a difference is a failure."""
        for lake in LAKES if self.lakes else ():
            proc = run_pgferry(f"{lake}.ini", "compare", timeout=300, cwd=self.workdir)
            if proc.returncode != 0:
                last = (proc.stdout + proc.stderr).strip().splitlines()[-1:]
                self.failures.append(f"compare on {lake} exit {proc.returncode}: {last}")

    def wait_equal(self, timeout: float = 240) -> None:
        try:
            wait_until(self.equal, timeout, "every table equal to its source")
        except AssertionError as exc:
            try:
                exc.add_note(f"differing: {', '.join(self.differences())}")
            except Exception as why:  # noqa: BLE001 - a server or lake unreadable: a note only
                exc.add_note(f"differing: not read ({why})")
            raise

    def wait_synced(self, timeout: float = 240) -> None:
        def ok() -> bool:
            return all(
                sql(
                    dsn,
                    "select count(*) filter (where merge_state = 'ok'), count(*)"
                    " from ferry.table_info where local",
                )[0]  # fmt: skip
                in ((3, 3), (2, 2))
                for dsn in (self.dst1, self.dst2, *self.nodes.values())
            )

        wait_until(ok, timeout, "every table ok")
