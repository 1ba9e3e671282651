"""``make demo``: the seed walkthrough in miniature on throw-away local clusters.

A source database ``digoal_01`` (root) replicates to a full copy on a second server (leaf
``dst1_digoal_01``) and to a partial, renamed copy (leaf ``dst2_digoal_02``: only
``userid < 1000``, into ``digoal_02.user_info1`` / ``user_session1``).  The ticker and the
workers run as daemons, a pgbench load of logins and logouts runs on the source, then
``status``, ``tables`` and ``compare`` show that every copy equals its source.  When the
lake extra is installed (deltalake), a lake leaf ``lake_digoal`` keeps both tables in
Delta Lake tables under the demo's folder beside them (``docs/lakehouse.md``) and is
compared too.  Everything started here is stopped at the end and its folder removed, on
success, failure, Ctrl-C or SIGTERM alike (the clusters live inside the demo's folder).
``PGFERRY_DEMO_PORT=N`` or ``--port N`` (``make demo DEMO_ARGS="--port N"``) puts the
source on port N and the target on N + 1; by default both take free ports.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from rich.console import Console
from rich.rule import Rule

from pgferry.errors import PgferryError
from pgferry.testing.cluster import LocalCluster, find_pg_tool, make_cluster
from pgferry.testing.scenario import sql
from pgferry.testing.seed import seed_fill, seed_schema

PORT_ENV = "PGFERRY_DEMO_PORT"  # the source's port; the target's is the next one
USERS = 20_000
LOAD_SECONDS = 10
TABLES = ("digoal_01.user_info", "digoal_01.user_session")

SCHEMA = seed_schema()
FILL = seed_fill(USERS)
PARTIAL = """
create schema digoal_02;
"""
# The lake leaf's tables: only columns with a lake type (docs/lakehouse.md).
LAKE_SHAPES = """
create schema digoal_01;
create table digoal_01.user_info (
    userid int primary key, engname text, cnname text, occupation text, birthday date,
    signname text, email text, qq numeric(20,0), crt_time timestamp, mod_time timestamp);
create table digoal_01.user_session (
    userid int primary key, logintime timestamp(0), login_count bigint default 0,
    logouttime timestamp(0));
"""
LOGIN = f"""\\set userid random(1, {USERS})
select userid, engname, cnname from digoal_01.user_info where userid = :userid;
update digoal_01.user_session set logintime = now(), login_count = login_count + 1
 where userid = :userid;
"""
LOGOUT = f"""\\set userid random(1, {USERS})
update digoal_01.user_session set logouttime = now(),
       online_interval = online_interval + (now() - logintime) where userid = :userid;
update digoal_01.user_info set mod_time = now() where userid = :userid;
"""


class Demo:
    def __init__(self, console: Console, workdir: Path) -> None:
        self.console = console
        self.workdir = workdir
        self.daemons: list[tuple[str, str]] = []
        self.sections = 0

    def pgferry(self, *args: str, show: bool = True) -> str:
        """Run ``pgferry ARGS`` as an operator would, echoing the command and its output."""
        if show:
            self.console.print(f"[bold cyan]$ pgferry {' '.join(map(_quote, args))}[/]")
        proc = subprocess.run(
            [sys.executable, "-m", "pgferry", *args],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=600,
        )
        output = (proc.stdout + proc.stderr).rstrip()
        if show and output:
            self.console.print(output, markup=False, highlight=False)
        if proc.returncode not in (0,) and args[-1] != "compare":
            raise PgferryError(f"pgferry {' '.join(args)} failed: {output.splitlines()[-1:]}")
        return output

    def daemon(self, ini: str, command: str) -> None:
        self.pgferry("-d", ini, command)
        self.daemons.append((ini, command))

    def stop_daemons(self) -> None:
        for ini, command in reversed(self.daemons):
            self.pgferry("-s", ini, command, show=False)
        deadline = time.monotonic() + 30
        pids = self.workdir / "pid"
        while time.monotonic() < deadline and any(pids.glob("*.pid")):
            time.sleep(0.2)
        for ini, command in self.daemons:
            if any(pids.glob("*.pid")):
                self.pgferry("-k", ini, command, show=False)
        self.daemons.clear()

    def step(self, title: str, numbered: bool = True) -> None:
        """A section's rule; sections are numbered 1, 2, ... in the order they run."""
        if numbered:
            self.sections += 1
            title = f"{self.sections}: {title}"
        self.console.print(Rule(f"[bold]{title}"))


def _quote(arg: str) -> str:
    return shlex.quote(arg) if any(c in arg for c in " <'\"") else arg


def _wait(what: str, connstr: str, query: str, expected: object, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(connstr, autocommit=True) as conn:
            if conn.execute(query).fetchone()[0] == expected:  # type: ignore[arg-type]
                return
        time.sleep(0.3)
    raise PgferryError(f"timed out waiting for {what}")


def _lake_available() -> bool:
    return importlib.util.find_spec("deltalake") is not None


def _write_configs(
    workdir: Path, src: str, dst1: str, dst2: str, lakestate: str | None, root: LocalCluster
) -> None:
    common = (
        "queue_name = replika\n"
        "logfile = %(config_dir)s/log/%(job_name)s.log\n"
        "pidfile = %(config_dir)s/pid/%(job_name)s.pid\n"
        "parallel_copies = 4\nloop_delay = 0.5\nexception_sleep = 2\n"
        "spark_master = local[1]\nspark.sql.shuffle.partitions = 2\n"
    )
    for job, dsn in (("src_digoal_01", src), ("dst1_digoal_01", dst1), ("dst2_digoal_02", dst2)):
        (workdir / f"{job}.ini").write_text(f"[londiste3]\njob_name = {job}\ndb = {dsn}\n{common}")
    if lakestate is not None:
        (workdir / "lake_digoal.ini").write_text(
            f"[londiste3]\njob_name = lake_digoal\ndb = {lakestate}\n{common}"
            "lake_path = %(config_dir)s/lake\nlake_format = delta\n"
        )
    (workdir / "pgqd.ini").write_text(
        "[pgqd]\n"
        f"base_connstr = host=127.0.0.1 port={root.port} user=postgres\n"
        "initial_database = postgres\nticker_period = 0.5\n"
        "logfile = %(config_dir)s/log/pgqd.log\npidfile = %(config_dir)s/pid/pgqd.pid\n"
    )
    (workdir / "login.sql").write_text(LOGIN)
    (workdir / "logout.sql").write_text(LOGOUT)


def _load(workdir: Path, root: LocalCluster, console: Console) -> None:
    pgbench = find_pg_tool("pgbench")
    base = [pgbench, "-h", "127.0.0.1", "-p", str(root.port), "-U", "postgres", "-n",
            "-M", "prepared", "-c", "2", "-j", "2", "-T", str(LOAD_SECONDS)]  # fmt: skip
    console.print(
        f"[bold cyan]$ pgbench -c 2 -T {LOAD_SECONDS} -f login.sql digoal_01 &"
        f"  pgbench -c 2 -T {LOAD_SECONDS} -f logout.sql digoal_01[/]"
    )
    runs = [
        subprocess.Popen(
            [*base, "-f", script, "digoal_01"],
            cwd=workdir,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for script in ("login.sql", "logout.sql")
    ]
    try:
        for run, script in zip(runs, ("login.sql", "logout.sql"), strict=True):
            out, _ = run.communicate(timeout=LOAD_SECONDS + 60)
            tps = [line for line in out.splitlines() if line.startswith("tps")]
            console.print(f"  {script}: {tps[0] if tps else out.strip().splitlines()[-1:]}")
    finally:
        for run in runs:  # interrupted: no pgbench outlives the demo
            if run.poll() is None:
                run.kill()
                run.wait()


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the server binds: a connection of a stopped server left in TIME_WAIT on the
        # port does not keep a new server from listening there.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _check_ports(ports: tuple[int, int]) -> None:
    """PgferryError, one line, when a port the demo was given is taken or out of range."""
    for port in ports:
        if not 1024 <= port <= 65535:
            raise PgferryError(f"demo port {port} is out of range (1024 to 65535)")
        if not _port_free(port):
            raise PgferryError(
                f"port {port} on 127.0.0.1 is in use: choose other ports"
                f" ({PORT_ENV}=N or --port N: the source on N, the target on N + 1)"
            )


def _stop_on_sigterm() -> None:
    """SIGTERM and SIGHUP (a closed terminal) end the demo as Ctrl-C does, through its
    clean-up, instead of leaving servers and folders behind."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def run(console: Console, ports: tuple[int, int] | None = None) -> None:
    """The demo; ``ports``: the source's and the target's (default: free ones). Whatever
    ends it, its daemons and servers are stopped and its folder removed."""
    console.print(Rule("[bold]pgferry demo: the walkthrough in miniature"))
    if ports is not None:
        _check_ports(ports)
    workdir = Path(tempfile.mkdtemp(prefix="pgferry-demo-"))
    os.chmod(workdir, 0o755)  # the clusters inside may run as another OS user
    console.print("Starting two throw-away PostgreSQL clusters on 127.0.0.1 ...")
    root_cluster: LocalCluster | None = None
    target_cluster: LocalCluster | None = None
    demo = Demo(console, workdir)
    try:
        root_cluster = make_cluster("demo-src", workdir, port=ports[0] if ports else None)
        target_cluster = make_cluster("demo-dst", workdir, port=ports[1] if ports else None)
        src = root_cluster.createdb("digoal_01")
        dst1 = target_cluster.createdb("digoal_01")
        dst2 = target_cluster.createdb("digoal_02")
        console.print(
            f"  source  127.0.0.1:{root_cluster.port}/digoal_01 ({USERS:,} users)\n"
            f"  target  127.0.0.1:{target_cluster.port}/digoal_01 and /digoal_02\n"
            f"  configs {workdir}"
        )
        sql(src, SCHEMA + FILL)
        sql(dst1, SCHEMA)
        sql(dst2, PARTIAL)
        lake = _lake_available()
        lakestate = target_cluster.createdb("lakestate") if lake else None
        if lakestate is not None:
            sql(lakestate, LAKE_SHAPES)
        _write_configs(workdir, src, dst1, dst2, lakestate, root_cluster)

        demo.step("root, leaf, workers and the ticker")
        demo.pgferry("src_digoal_01.ini", "create-root", "src_digoal_01", src)
        demo.daemon("src_digoal_01.ini", "worker")
        demo.pgferry("dst1_digoal_01.ini", "create-leaf", "dst1_digoal_01", dst1,
                     f"--provider={src}")  # fmt: skip
        demo.daemon("dst1_digoal_01.ini", "worker")
        demo.daemon("pgqd.ini", "ticker")

        demo.step("add the tables on the root, then on the leaf (copied in parallel)")
        demo.pgferry("src_digoal_01.ini", "add-table", *TABLES)
        demo.pgferry("dst1_digoal_01.ini", "add-table", *TABLES)
        demo.pgferry("dst1_digoal_01.ini", "wait-sync")
        demo.pgferry("dst1_digoal_01.ini", "tables")

        demo.step("a partial, renamed leaf (userid < 1000 into digoal_02)")
        demo.pgferry("dst2_digoal_02.ini", "create-leaf", "dst2_digoal_02", dst2,
                     f"--provider={src}")  # fmt: skip
        demo.daemon("dst2_digoal_02.ini", "worker")
        for table, dest in zip(TABLES, ("digoal_02.user_info1", "digoal_02.user_session1"),
                               strict=True):  # fmt: skip
            demo.pgferry("dst2_digoal_02.ini", "add-table", table, f"--dest-table={dest}",
                         "--copy-condition=userid<1000", "--create")  # fmt: skip
        demo.pgferry("dst2_digoal_02.ini", "wait-sync")
        demo.pgferry("dst2_digoal_02.ini", "tables")

        if lakestate is not None:
            demo.step("a lake leaf: the tables kept in Delta Lake tables")
            console.print(
                "  lakestate holds the leaf's state and the tables' shape: qq as numeric(20,0),"
                " online_interval left out (interval has no lake type)"
            )
            demo.pgferry("lake_digoal.ini", "create-leaf", "lake_digoal", lakestate,
                         f"--provider={src}")  # fmt: skip
            demo.daemon("lake_digoal.ini", "worker")
            demo.pgferry("lake_digoal.ini", "add-table", *TABLES, "--handler=lake")
            demo.pgferry("lake_digoal.ini", "wait-sync")
            demo.pgferry("lake_digoal.ini", "tables")
        leaves = ["dst1_digoal_01.ini", "dst2_digoal_02.ini"]
        leaves += ["lake_digoal.ini"] if lake else []

        demo.step("a pgbench load of logins and logouts on the source")
        _load(workdir, root_cluster, console)
        demo.pgferry("src_digoal_01.ini", "status")
        for ini in leaves:
            demo.pgferry(ini, "wait-root")

        demo.step("compare every copy with the source, each at one tick")
        outs = [demo.pgferry(ini, "compare") for ini in leaves]
        demo.step("TRUNCATE is replicated too")
        sql(src, "truncate digoal_01.user_session")
        demo.pgferry("dst1_digoal_01.ini", "wait-root")
        _wait("the truncate on dst1", dst1, "select count(*) from digoal_01.user_session", 0)
        console.print("  digoal_01.user_session on dst1: 0 rows")
        demo.pgferry("dst1_digoal_01.ini", "members")

        demo.step("result", numbered=False)
        equal = not any("Results do not match" in out for out in outs)
        if equal:
            console.print("[bold green]Every replicated table equals its source.[/]")
            if lake:
                console.print("[bold green]The lake copy (Delta tables) equals the source.[/]")
        else:
            console.print("[bold red]Some tables differ: see compare above.[/]")
            raise SystemExit(1)
    finally:
        console.print("Stopping workers, ticker and clusters ...")
        try:
            demo.stop_daemons()
            for cluster in (target_cluster, root_cluster):
                if cluster is not None:
                    cluster.destroy()
        finally:
            # The configs, logs and any cluster that failed half-way to start.
            shutil.rmtree(workdir, ignore_errors=True)


def ports_asked(argv: list[str], environ: dict[str, str]) -> tuple[int, int] | None:
    """(source, target) ports from ``--port N`` or, else, PGFERRY_DEMO_PORT; None: free
    ones. PgferryError for a value that is not a port number."""
    parser = argparse.ArgumentParser(prog="python -m pgferry.demo", exit_on_error=False)
    parser.add_argument("--port", help=f"the source's port (the target's is the next one;"
                        f" default ${PORT_ENV}, else free ports)")  # fmt: skip
    try:
        args, unknown = parser.parse_known_args(argv)
    except argparse.ArgumentError as exc:
        raise PgferryError(f"demo: {exc}") from None
    if unknown:
        raise PgferryError(f"demo: unknown argument {unknown[0]} (known: --port N)")
    value = args.port if args.port is not None else environ.get(PORT_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise PgferryError(f"demo: port {value!r} is not a number (--port N or {PORT_ENV}=N)")
    return int(value), int(value) + 1


def main(argv: list[str] | None = None) -> int:
    console = Console()
    _stop_on_sigterm()
    try:
        run(console, ports_asked(sys.argv[1:] if argv is None else argv, dict(os.environ)))
    except PgferryError as exc:
        console.print(f"[bold red]demo failed:[/] {exc}")
        return 1
    except KeyboardInterrupt:
        console.print("[bold red]demo interrupted:[/] everything it started is stopped and removed")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
