"""Highly available sides for tests: a replicated set-up whose databases are named by
multi-host connect strings, and a Patroni pair with etcd to put under it.

:class:`HaScenario` is :mod:`.scenario`'s root and full leaf with every connect string
(the jobs' ``db``, ``--provider=``, the ticker's ``base_connstr``) naming all of a side's
servers with ``target_session_attrs=read-write``, as one runs behind Patroni without a
proxy: whoever fails a primary over, the daemons must find the new one.
:class:`PatroniPair` runs one etcd member and two Patroni nodes on 127.0.0.1 (PostgreSQL
run by the ``postgres`` OS user, ``synchronous_mode`` on, so that a promotion loses no
acknowledged commit) and kills its leader as a crash would.  :func:`patroni_missing` says
in one line why a machine cannot run it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from psycopg import sql as q

from pgferry.daemon import read_pid
from pgferry.testing.cluster import RUN_AS, LocalCluster, free_port, server_major
from pgferry.testing.commands import run_pgferry
from pgferry.testing.scenario import (
    FILL,
    SCHEMA,
    TABLES,
    process_running,
    sql,
    wait_until,
    write_job_ini,
    write_ticker_ini,
)

PG_MAJOR = 15
PG_BIN = Path(f"/usr/lib/postgresql/{PG_MAJOR}/bin")
# Patroni refuses a ttl under 20 s; loop_wait + 2 * retry_timeout must fit in it.  A dead
# leader's key expires after ttl: a failover takes up to ttl + loop_wait.
TTL, LOOP_WAIT, RETRY_TIMEOUT = 20, 1, 5
# How long a pair may take to bootstrap (initdb, a base backup) and to fail over.
START_TIMEOUT = 120.0
FAILOVER_TIMEOUT = 3.0 * TTL


def multi_host(*clusters: LocalCluster) -> str:
    """A connect string (no dbname) naming every one of ``clusters``, the primary wanted."""
    return ha_connstr([f"127.0.0.1:{c.port}" for c in clusters])


def ha_connstr(servers: list[str]) -> str:
    """``host=h1,h2 port=p1,p2 user=postgres target_session_attrs=read-write``."""
    hosts = ",".join(s.rsplit(":", 1)[0] for s in servers)
    ports = ",".join(s.rsplit(":", 1)[1] for s in servers)
    return f"host={hosts} port={ports} user=postgres target_session_attrs=read-write"


@dataclass
class HaScenario:
    """A root on ``root`` and a full leaf on ``leaf`` (connect strings without dbname),
    the ticker and both workers as ``-d`` daemons through the command line."""

    root: str
    leaf: str
    workdir: Path
    dbname: str = "digoal_01"
    src: str = ""
    dst: str = ""

    ROOT, LEAF = "src_digoal_01", "dst1_digoal_01"
    ROOT_INI, LEAF_INI = f"{ROOT}.ini", f"{LEAF}.ini"
    JOBS = (ROOT, LEAF)

    def cli(self, *args: str, check: bool = True) -> str:
        proc = run_pgferry(*args, timeout=300, cwd=self.workdir)
        if check and proc.returncode != 0:
            raise AssertionError(f"pgferry {' '.join(args)}: {proc.stdout}{proc.stderr}")
        return proc.stdout + proc.stderr

    def status(self, ini: str) -> tuple[int, dict]:
        proc = run_pgferry(ini, "status", "--json", timeout=120, cwd=self.workdir)
        try:
            return proc.returncode, json.loads(proc.stdout)
        except ValueError as exc:
            raise AssertionError(f"pgferry status: {proc.stdout}{proc.stderr}") from exc

    def pid(self, job: str) -> int | None:
        pid = read_pid(self.workdir / "pid" / f"{job}.pid")
        return pid if pid is not None and process_running(pid) else None

    def start(self, job: str) -> None:
        if self.pid(job) is None:
            self.cli("-d", f"{job}.ini", "ticker" if job == "pgqd" else "worker")

    def worker_running(self) -> bool:
        return self.pid(self.LEAF) is not None

    def setup(self) -> None:
        for base in (self.root, self.leaf):
            sql(
                f"{base} dbname=postgres",
                q.SQL("create database {}").format(q.Identifier(self.dbname)),
            )
        self.src = f"{self.root} dbname={self.dbname}"
        self.dst = f"{self.leaf} dbname={self.dbname}"
        common = (
            f"queue_name = replika\nlogfile = {self.workdir}/log/%(job_name)s.log\n"
            f"pidfile = {self.workdir}/pid/%(job_name)s.pid\nloop_delay = 0.2\n"
            "exception_sleep = 1\nlock_timeout = 120\n"
        )
        for job, dsn in ((self.ROOT, self.src), (self.LEAF, self.dst)):
            write_job_ini(self.workdir, job, dsn, common)
        write_ticker_ini(self.workdir, self.root, self.dbname)
        sql(self.src, SCHEMA + FILL)
        sql(self.dst, SCHEMA)
        self.cli(self.ROOT_INI, "create-root", self.ROOT, self.src)
        self.cli(self.LEAF_INI, "create-leaf", self.LEAF, self.dst, f"--provider={self.src}")
        for job in ("pgqd", *self.JOBS):
            self.start(job)
        self.cli(self.ROOT_INI, "add-table", *TABLES)
        self.cli(self.LEAF_INI, "add-table", *TABLES)

    def shutdown(self) -> None:
        for job in (*reversed(self.JOBS), "pgqd"):
            pid = self.pid(job)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)

    def leaf_tick(self) -> int:
        return sql(self.dst, "select last_tick_id from ferry_node.local_state")[0][0] or 0

    @staticmethod
    def _digest(dsn: str, table: str) -> list[tuple]:
        return sql(
            dsn,
            f"select count(*), md5(coalesce(string_agg(t::text, '|' order by t::text), ''))"
            f" from {table} t",
        )

    def differences(self) -> list[str]:
        return [t for t in TABLES if self._digest(self.src, t) != self._digest(self.dst, t)]

    def wait_equal(self, timeout: float = 240) -> None:
        wait_until(lambda: not self.differences(), timeout, "every table equal to its source")

    def wait_synced(self, timeout: float = 240) -> None:
        query = "select bool_and(merge_state = 'ok') from ferry.table_info where local"
        wait_until(lambda: sql(self.dst, query)[0][0] is True, timeout, "every table ok")


def patroni_missing() -> str | None:
    """Why this machine cannot run :class:`PatroniPair` (one line), or None."""
    try:
        import etcd  # noqa: F401 - patroni[etcd]'s client
        import patroni  # noqa: F401
    except ImportError:
        return "Patroni is not installed: pip install 'patroni[etcd]'"
    if shutil.which("etcd") is None:
        return "etcd is not installed: apt-get install etcd-server"
    if not (PG_BIN / "postgres").exists() or server_major(PG_BIN) != PG_MAJOR:
        return f"PostgreSQL {PG_MAJOR} server binaries not found in {PG_BIN}"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"running as root and there is no OS user '{RUN_AS}' to run PostgreSQL"
    return None


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", RUN_AS, "--", *cmd] if os.geteuid() == 0 else cmd


def _python_for_server_user() -> list[str] | None:
    """An interpreter the server's OS user can run, importing this environment's Patroni.

    The environment's own when that user may run it; else (a virtualenv whose interpreter
    lies in a home only root may enter) the system's python3 of the same version without
    its site packages, on this environment's site-packages.  None when there is neither.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = f"PYTHONPATH={sysconfig.get_paths()['purelib']}"
    candidates = [[sys.executable]]
    candidates += [
        ["env", site, path, "-S"]
        for path in (f"/usr/bin/{version}", f"/usr/local/bin/{version}", shutil.which(version))
        if path
    ]
    for python in candidates:
        probe = _as_server_user([*python, "-c", "import patroni"])
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return python
    return None


@dataclass
class PatroniNode:
    name: str
    base: Path
    port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def role(self) -> str | None:
        """'primary', 'replica' or None (not answering), from Patroni's REST API."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/patroni",
                                        timeout=2) as resp:  # fmt: skip
                state = json.loads(resp.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None
        if state.get("state") != "running":
            return None
        return state.get("role")

    def postmaster(self) -> int | None:
        """The pid of the node's running postmaster (postmaster.pid's first line)."""
        try:
            first = (self.base / "data" / "postmaster.pid").read_text().split("\n", 1)[0]
        except OSError:
            return None
        pid = int(first) if first.strip().isdigit() else None
        return pid if pid is not None and process_running(pid) else None

    def sync_standby(self) -> bool:
        """Whether Patroni has made this node the leader's synchronous standby."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/sync", timeout=2):
                return True
        except (OSError, urllib.error.URLError):
            return False


@dataclass
class PatroniPair:
    """etcd and two Patroni nodes in ``base`` (a fresh temporary folder by default)."""

    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pgferry-patroni-")))
    scope: str = "pgferry"
    nodes: list[PatroniNode] = field(default_factory=list)
    etcd: subprocess.Popen | None = None
    etcd_port: int = field(default_factory=free_port)

    def start(self) -> PatroniPair:
        os.chmod(self.base, 0o755)
        self._start_etcd()
        python = _python_for_server_user()
        if python is None:
            raise AssertionError(f"no Python that the OS user {RUN_AS} may run imports Patroni")
        for i in (1, 2):
            node = PatroniNode(f"node{i}", self.base / f"node{i}")
            node.base.mkdir()
            config = node.base / "patroni.yml"
            config.write_text(self._config(node))
            if os.geteuid() == 0:
                for path in (node.base, config):
                    shutil.chown(path, user=RUN_AS)
            log = (node.base / "patroni.log").open("ab")
            node.proc = subprocess.Popen(
                _as_server_user([*python, "-m", "patroni", str(config)]),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
            self.nodes.append(node)
        wait_until(self._ready, START_TIMEOUT, "a Patroni leader and its synchronous standby")
        return self

    def _start_etcd(self) -> None:
        peer = free_port()
        url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        log = (self.base / "etcd.log").open("ab")
        self.etcd = subprocess.Popen(
            [
                "etcd", "--name", "e1", "--data-dir", str(self.base / "etcd"),
                "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"e1={peer_url}",
            ],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                    return json.loads(resp.read()).get("health") == "true"
            except (OSError, urllib.error.URLError, ValueError):
                return False

        wait_until(healthy, 30, "etcd to answer")

    def _config(self, node: PatroniNode) -> str:
        # JSON is YAML: no quoting rules of our own.
        config = {
            "scope": self.scope,
            "namespace": "/pgferry/",
            "name": node.name,
            "restapi": {
                "listen": f"127.0.0.1:{node.api_port}",
                "connect_address": f"127.0.0.1:{node.api_port}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": False,
                        "parameters": {
                            "synchronous_commit": "on",
                            "max_connections": 200,
                            "fsync": "off",
                            "full_page_writes": "off",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, {"auth": "trust"}],
            },
            "postgresql": {
                "listen": node.server,
                "connect_address": node.server,
                "data_dir": str(node.base / "data"),
                "bin_dir": str(PG_BIN),
                "pgpass": str(node.base / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(node.base)},
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
        }
        return json.dumps(config, indent=2)

    def _ready(self) -> bool:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is not None:
                tail = (node.base / "patroni.log").read_text(errors="replace").splitlines()[-3:]
                raise AssertionError(f"Patroni {node.name} exited: {' | '.join(tail)}")
        roles = [n.role() for n in self.nodes]
        return sorted(roles, key=str) == ["primary", "replica"] and any(
            n.sync_standby() for n in self.nodes
        )

    def leader(self) -> PatroniNode | None:
        return next((n for n in self.nodes if n.role() == "primary"), None)

    def connstr(self) -> str:
        """Both nodes, the primary wanted (no dbname)."""
        return ha_connstr([n.server for n in self.nodes])

    def kill_leader(self) -> tuple[PatroniNode, PatroniNode]:
        """SIGKILL the leader's Patroni and its postmaster, as a crash of its machine would,
        and wait until the other node is promoted.  Returns (dead, new leader)."""
        dead = self.leader()
        if dead is None:
            raise AssertionError("the pair has no leader")
        other = next(n for n in self.nodes if n is not dead)
        postmaster = dead.postmaster()
        if dead.proc is not None:
            os.killpg(dead.proc.pid, signal.SIGKILL)
            dead.proc.wait()
        if postmaster is not None:
            os.kill(postmaster, signal.SIGKILL)
        wait_until(lambda: other.role() == "primary", FAILOVER_TIMEOUT, "the standby promoted")
        return dead, other

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait()
            postmaster = node.postmaster()
            if postmaster is not None:
                os.kill(postmaster, signal.SIGKILL)
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.kill()
            self.etcd.wait()
        shutil.rmtree(self.base, ignore_errors=True)
