"""The two replication systems under test, driven through their own command lines.

:class:`PgferryRig` runs ``pgferry`` (node commands, ``worker``, ``ticker``);
:class:`LondisteRig` runs the real Londiste 3 (``/usr/bin/londiste``, ``/usr/bin/pgqd``)
from Debian, as the ``postgres`` OS user like the anchor measurement did.  Both expose the
same small surface so every phase of the benchmark is written once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from psycopg import sql

from bench.repl_env import SEQUENCES, TABLES, BenchError, Pair, qualified, wait_for
from pgferry.daemon import pid_alive, read_pid

QUEUE = "replika"
ROOT_NODE = "src_digoal_01"
LEAF_NODE = "dst1_digoal_01"
ROOT_JOB = "l3_src_digoal_01"
LEAF_JOB = "l3_dst1_digoal_01"
COMMAND_TIMEOUT = 600


class Rig:
    """One root → leaf replication set-up on a :class:`Pair`."""

    name = ""
    queue_schema = ""  # schema of the queue API on the root (same function names)
    stop_args: tuple[str, ...] = ("-s",)  # graceful stop of a worker through its pidfile

    def __init__(
        self, pair: Pair, workdir: Path, with_seqs: bool = True, verbose: bool = False
    ) -> None:
        self.pair = pair
        self.dir = workdir
        self.with_seqs = with_seqs
        # -v on the leaf worker: pgferry then logs one line per batch, as Londiste does.
        self.worker_flags: tuple[str, ...] = ("-v",) if verbose else ()
        for sub in ("conf", "log", "pid"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        self.root_ini = workdir / "conf" / "root.ini"
        self.leaf_ini = workdir / "conf" / "leaf.ini"
        self.ticker_ini = workdir / "conf" / "ticker.ini"
        self.consumer = LEAF_JOB
        self.leaf_started_at = 0  # leaf log size when the leaf worker was last started
        self.leaf_settings: dict[str, str] = {}  # more settings of pgferry's leaf ini

    # --- to be provided by each system --------------------------------------------------
    def command(self, ini: Path, *args: str) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def ticker_command(self) -> list[str]:
        raise NotImplementedError

    def leaf_states(self) -> list[str | None]:
        raise NotImplementedError

    def write_configs(self) -> None:
        raise NotImplementedError

    @property
    def leaf_log(self) -> Path:
        return self.dir / "log" / f"{LEAF_JOB}.log"

    @property
    def leaf_pidfile(self) -> Path:
        return self.dir / "pid" / f"{LEAF_JOB}.pid"

    @property
    def ticker_pidfile(self) -> Path:
        return self.dir / "pid" / "ticker.pid"

    @property
    def root_pidfile(self) -> Path:
        return self.dir / "pid" / f"{ROOT_JOB}.pid"

    # --- running commands ---------------------------------------------------------------
    def run(self, cmd: list[str], what: str) -> str:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            cwd=self.dir,
            env=self.env(),
            timeout=COMMAND_TIMEOUT,
        )
        out = (proc.stdout + proc.stderr).strip()
        with (self.dir / "log" / "commands.txt").open("a") as fh:
            fh.write(f"$ {what}\n{out}\n\n")
        if proc.returncode != 0:
            last = out.splitlines()[-1] if out else f"exit {proc.returncode}"
            raise BenchError(f"{self.name} {what} failed: {last}")
        return out

    def root(self, *args: str) -> str:
        return self.run(self.command(self.root_ini, *args), "root " + " ".join(args[:2]))

    def leaf(self, *args: str) -> str:
        shown = [a for a in args if a != "-v"][:2]
        return self.run(self.command(self.leaf_ini, *args), "leaf " + " ".join(shown))

    # --- life cycle ---------------------------------------------------------------------
    def setup(self) -> None:
        """Nodes, ticker, both workers, the four tables (and two sequences) on the root."""
        self.write_configs()
        self.root("create-root", ROOT_NODE, self.pair.dsn("root"))
        self.leaf(
            "create-leaf", LEAF_NODE, self.pair.dsn("leaf"), f"--provider={self.pair.dsn('root')}"
        )
        self.start_ticker()
        self.root("-d", "worker")
        self.start_leaf()
        self.root("add-table", *(qualified(t) for t in TABLES))
        if self.with_seqs:
            self.root("add-seq", *(qualified(s) for s in SEQUENCES))

    def start_ticker(self) -> None:
        self.run(self.ticker_command(), "ticker start")
        wait_for("ticker pidfile", lambda: read_pid(self.ticker_pidfile) is not None, 30)

    def start_leaf(self) -> None:
        self.leaf_started_at = self.log_size()
        self.leaf(*self.worker_flags, "-d", "worker")
        wait_for("leaf worker pidfile", lambda: read_pid(self.leaf_pidfile) is not None, 60)

    def leaf_ready(self) -> bool:
        """True once the leaf worker is in the steady state a long-running worker is in."""
        return True

    def stop_leaf(self, timeout: float = 300) -> None:
        """Graceful stop (``-s``), then wait until the process is gone."""
        pid = read_pid(self.leaf_pidfile)
        if pid is None or not pid_alive(pid):
            return
        self.leaf(*self.stop_args)
        wait_for("leaf worker exit", lambda: not pid_alive(pid), timeout, poll=0.1)

    def leaf_running(self) -> bool:
        pid = read_pid(self.leaf_pidfile)
        return pid is not None and pid_alive(pid)

    def stop_all(self) -> None:
        """Stop the workers and the ticker this rig started (by their pidfiles)."""
        for pidfile, ini in (
            (self.leaf_pidfile, self.leaf_ini),
            (self.root_pidfile, self.root_ini),
        ):
            pid = read_pid(pidfile)
            if pid is not None and pid_alive(pid):
                try:
                    self.run(self.command(ini, *self.stop_args), "stop")
                    wait_for("worker exit", lambda p=pid: not pid_alive(p), 60)
                except BenchError:
                    _kill(pid)
        pid = read_pid(self.ticker_pidfile)
        if pid is not None and pid_alive(pid):
            _kill(pid)

    # --- queue figures on the root ------------------------------------------------------
    def _q(self, template: str) -> sql.Composed:
        return sql.SQL(template).format(q=sql.Identifier(self.queue_schema))

    def consumer_position(self) -> tuple[int, float]:
        """(last finished tick, lag seconds) of the leaf's consumer on the root queue."""
        row = (
            self.pair.conn("root")
            .execute(
                self._q(
                    "select last_tick, extract(epoch from lag)::float8"
                    " from {q}.get_consumer_info(%s, %s)"
                ),
                (QUEUE, self.consumer),
            )
            .fetchone()
        )
        if row is None:
            raise BenchError(f"{self.name}: consumer {self.consumer} not found on the root")
        return int(row[0]), float(row[1])

    def pending_events(self) -> int | None:
        return self.pair.scalar(
            "root",
            self._q("select pending_events from {q}.get_consumer_info(%s, %s)"),
            (QUEUE, self.consumer),
        )

    def last_tick(self) -> int:
        return int(
            self.pair.scalar(
                "root", self._q("select last_tick_id from {q}.get_queue_info(%s)"), (QUEUE,)
            )
        )

    def force_tick(self, timeout: float = 60) -> int:
        """Ask for a tick now and wait until the ticker made it; returns its id."""
        before = self.last_tick()
        self.pair.scalar("root", self._q("select {q}.force_tick(%s)"), (QUEUE,))
        wait_for("a forced tick", lambda: self.last_tick() > before, timeout)
        return self.last_tick()

    def set_idle_period(self, value: str) -> None:
        self.pair.scalar(
            "root",
            self._q("select {q}.set_queue_config(%s, 'ticker_idle_period', %s)"),
            (QUEUE, value),
        )

    def idle_period(self) -> str:
        return str(
            self.pair.scalar(
                "root",
                self._q("select queue_ticker_idle_period from {q}.get_queue_info(%s)"),
                (QUEUE,),
            )
        )

    def reached(self, target: int) -> bool:
        """True once the leaf's consumer finished ``target``; fails fast if the worker died."""
        if self.consumer_position()[0] >= target:
            return True
        if not self.leaf_running():
            tail = " | ".join(self.log_tail(3))
            raise BenchError(f"{self.name} leaf worker is not running; log: {tail}")
        return False

    def wait_caught_up(self, timeout: float) -> int:
        """Force a tick after the writes and wait until the leaf's consumer has passed it."""
        target = self.force_tick()
        wait_for(
            f"{self.name} leaf to reach tick {target}",
            lambda: self.reached(target),
            timeout,
            poll=0.2,
        )
        return target

    def log_size(self) -> int:
        try:
            return self.leaf_log.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset: int, keep: int = 20) -> list[str]:
        """Leaf log lines written since ``offset``: the first and last ``keep`` of them."""
        try:
            with self.leaf_log.open("rb") as fh:
                fh.seek(offset)
                lines = fh.read().decode(errors="replace").splitlines()
        except OSError:
            return []
        if len(lines) <= 2 * keep:
            return lines
        return [*lines[:keep], f"... {len(lines) - 2 * keep} lines ...", *lines[-keep:]]

    def log_tail(self, lines: int = 15) -> list[str]:
        try:
            text = self.leaf_log.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return text[-lines:]


def _kill(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)


class PgferryRig(Rig):
    name = "pgferry"
    queue_schema = "ferry_queue"
    stop_args = ("-s", "worker")  # pgferry wants the command after the config

    def command(self, ini: Path, *args: str) -> list[str]:
        return [sys.executable, "-m", "pgferry", str(ini), *args]

    def ticker_command(self) -> list[str]:
        return self.command(self.ticker_ini, "-d", "ticker")

    def write_configs(self) -> None:
        for ini, job, side in (
            (self.root_ini, ROOT_JOB, "root"),
            (self.leaf_ini, LEAF_JOB, "leaf"),
        ):
            ini.write_text(
                "[pgferry]\n"
                f"job_name = {job}\n"
                f"db = {self.pair.dsn(side)}\n"
                f"queue_name = {QUEUE}\n"
                f"logfile = {self.dir}/log/%(job_name)s.log\n"
                f"pidfile = {self.dir}/pid/%(job_name)s.pid\n"
                "parallel_copies = 16\n"
                + "".join(f"{k} = {v}\n" for k, v in self._extra(side).items()),
                encoding="utf-8",
            )
        self.ticker_ini.write_text(
            "[pgqd]\n"
            f"base_connstr = host=127.0.0.1 port={self.pair.root.port} user=postgres\n"
            "initial_database = template1\n"
            f"logfile = {self.dir}/log/ticker.log\n"
            f"pidfile = {self.ticker_pidfile}\n",
            encoding="utf-8",
        )

    def setup(self) -> None:
        super().setup()
        # The leaf's consumer name on the root is whatever the leaf registered.
        name = self.pair.scalar(
            "leaf",
            "select consumer_name from ferry_node.local_state where queue_name = %s",
            (QUEUE,),
        )
        if name:
            self.consumer = name

    def _extra(self, side: str) -> dict[str, str]:
        return self.leaf_settings if side == "leaf" else {}

    def leaf_ready(self) -> bool:
        """The leaf worker runs (it is caught up once ``wait_caught_up`` returns).

        A caught-up worker runs without Spark (it starts for a copy or after large batches
        and stops when unused, ``spark_idle_timeout``), so the copy phases include Spark's
        start, as they would in production.
        """
        return self.leaf_running()

    def leaf_states(self) -> list[str | None]:
        rows = (
            self.pair.conn("leaf")
            .execute(
                "select merge_state from ferry.table_info where queue_name = %s and local",
                (QUEUE,),
            )
            .fetchall()
        )
        return [r[0] for r in rows]


class LondisteRig(Rig):
    name = "londiste"
    queue_schema = "pgq"
    LONDISTE = "/usr/bin/londiste"
    PGQD = "/usr/bin/pgqd"

    @classmethod
    def available(cls) -> bool:
        return Path(cls.LONDISTE).exists() and Path(cls.PGQD).exists()

    def __init__(
        self, pair: Pair, workdir: Path, with_seqs: bool = True, verbose: bool = False
    ) -> None:
        super().__init__(pair, workdir, with_seqs, verbose=False)  # its INFO has batch lines
        if os.geteuid() == 0:
            for path in (workdir, *workdir.iterdir()):
                shutil.chown(path, user="postgres")

    def _as_postgres(self, cmd: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd

    def command(self, ini: Path, *args: str) -> list[str]:
        return self._as_postgres([self.LONDISTE, str(ini), *args])

    def env(self) -> dict[str, str]:
        # Debian's londiste runs on the system python: keep our venv out of its way.
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        }
        env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return env

    def ticker_command(self) -> list[str]:
        return self._as_postgres([self.PGQD, "-d", str(self.ticker_ini)])

    def write_configs(self) -> None:
        for ini, job, side in (
            (self.root_ini, ROOT_JOB, "root"),
            (self.leaf_ini, LEAF_JOB, "leaf"),
        ):
            ini.write_text(
                "[londiste]\n"
                f"job_name = {job}\n"
                f"db = {self.pair.dsn(side)}\n"
                f"queue_name = {QUEUE}\n"
                f"logfile = {self.dir}/log/%(job_name)s.log\n"
                f"pidfile = {self.dir}/pid/%(job_name)s.pid\n"
                "parallel_copies = 16\n",
                encoding="utf-8",
            )
        self.ticker_ini.write_text(
            "[pgqd]\n"
            f"base_connstr = host=127.0.0.1 port={self.pair.root.port} user=postgres\n"
            "initial_database = template1\n"
            f"logfile = {self.dir}/log/ticker.log\n"
            f"pidfile = {self.ticker_pidfile}\n",
            encoding="utf-8",
        )
        if os.geteuid() == 0:
            for path in (self.root_ini, self.leaf_ini, self.ticker_ini):
                shutil.chown(path, user="postgres")

    def leaf_states(self) -> list[str | None]:
        rows = (
            self.pair.conn("leaf")
            .execute("select merge_state from londiste.get_table_list(%s) where local", (QUEUE,))
            .fetchall()
        )
        return [r[0] for r in rows]


RIGS = {"pgferry": PgferryRig, "londiste": LondisteRig}


def chosen_systems(skip_pgferry: bool, skip_londiste: bool) -> list[str]:
    """The systems a benchmark run measures: both unless skipped, Londiste only when its
    Debian packages are installed."""
    systems = [
        s for s, skip in (("pgferry", skip_pgferry), ("londiste", skip_londiste)) if not skip
    ]
    if "londiste" in systems and not LondisteRig.available():
        print("Londiste not installed (/usr/bin/londiste, /usr/bin/pgqd): skipping it")
        systems.remove("londiste")
    return systems
