"""Streaming standbys of harness clusters, for tests of failover.

A :class:`Standby` is a physical copy of a :class:`~pgferry.testing.cluster.LocalCluster`
made with ``pg_basebackup -R`` (run as the cluster's OS user, like the cluster's own
binaries) that streams the primary's WAL from then on: synchronous (the primary's
``synchronous_standby_names`` names it, and its commits wait for it) or asynchronous.
:meth:`Standby.promote` makes it a primary (``pg_ctl promote``); :meth:`Standby.cut_off`
stops it receiving WAL, so that what the primary commits afterwards is what a failover to
this standby loses.  The nodes reach a side through :func:`both_hosts`, a connect string
naming both servers with ``target_session_attrs=read-write``, as one does behind Patroni
without a proxy: whichever is primary serves.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from pgferry.errors import PgferryError
from pgferry.testing.cluster import SUPERUSER, LocalCluster, _chown_tree, _is_root, free_port


def _one(cluster: LocalCluster, query: str, dbname: str = "postgres"):
    with psycopg.connect(cluster.connstr(dbname), autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    return None if row is None else row[0]


def _poll(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise PgferryError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass
class Standby:
    """A streaming standby of ``primary`` (a cluster of its own, on its own port)."""

    primary: LocalCluster
    cluster: LocalCluster
    name: str
    sync: bool

    def connstr(self, dbname: str = "postgres", **extra: str) -> str:
        return self.cluster.connstr(dbname, **extra)

    def wait_caught_up(self, timeout: float = 60) -> None:
        target = _one(self.primary, "select pg_current_wal_lsn()::text")
        _poll(
            lambda: bool(
                _one(self.cluster, f"select pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")
            ),
            timeout,
            f"standby {self.name} to replay up to {target}",
        )

    def cut_off(self, timeout: float = 60) -> None:
        """Stop receiving the primary's WAL (the walreceiver is not restarted): from now
        on the primary's commits are missing here, as on a standby that lags when its
        primary dies.  A synchronous standby is first made asynchronous, or the
        primary's commits would wait for it for ever."""
        if self.sync:
            self.primary.psql("postgres", "alter system set synchronous_standby_names = ''")
            self.primary.psql("postgres", "select pg_reload_conf()")
            self.sync = False
        self.cluster.psql("postgres", "alter system set primary_conninfo = ''")
        self.cluster.psql("postgres", "select pg_reload_conf()")
        _poll(
            lambda: not _one(self.cluster, "select count(*) from pg_stat_wal_receiver"),
            timeout,
            f"standby {self.name} to stop receiving",
        )

    def promote(self, timeout: float = 60) -> None:
        """``pg_ctl promote`` and wait until it accepts writes."""
        self.cluster._run("pg_ctl", "-D", str(self.cluster.datadir), "-w", "promote")
        _poll(
            lambda: not _one(self.cluster, "select pg_is_in_recovery()"),
            timeout,
            f"standby {self.name} to be promoted",
        )

    def destroy(self) -> None:
        self.cluster.destroy(background=True)


def rebuild_as_standby(old: LocalCluster, primary: LocalCluster, name: str) -> Standby:
    """The failed primary ``old`` made again as an asynchronous standby of ``primary`` (the
    promoted one), in its own directory and on its own port: the side's connect string
    still names both servers.  Its data is dropped and copied anew, as a DBA does without
    pg_rewind."""
    old.stop("immediate")
    shutil.rmtree(old.datadir, ignore_errors=True)
    return _copy_of(primary, old, name, sync=False)


def make_standby(
    primary: LocalCluster, name: str, *, sync: bool = False, parent: Path | None = None
) -> Standby:
    """A running standby of ``primary`` made with ``pg_basebackup -R``; with ``sync`` the
    primary's ``synchronous_standby_names`` names it and commits wait for it
    (``synchronous_commit = on``: the harness's clusters run with it off)."""
    parent = parent or Path(tempfile.gettempdir())
    base = Path(tempfile.mkdtemp(prefix=f"pgferry-{name}-", dir=parent))
    if _is_root():
        os.chmod(base, 0o755)
        _chown_tree(base)
    cluster = LocalCluster(base_dir=base, bindir=primary.bindir, port=free_port())
    cluster.settings = dict(primary.settings)
    return _copy_of(primary, cluster, name, sync=sync)


def _copy_of(primary: LocalCluster, cluster: LocalCluster, name: str, *, sync: bool) -> Standby:
    """``cluster`` (its directory without data) made a streaming copy of ``primary``."""
    cluster._run(
        "pg_basebackup",
        "-h",
        "127.0.0.1",
        "-p",
        str(primary.port),
        "-U",
        SUPERUSER,
        "-D",
        str(cluster.datadir),
        "-R",
        "-X",
        "stream",
        "-c",
        "fast",
        "--no-sync",
        timeout=300,
    )
    # The copy holds the primary's port: this server listens on its own.  The standby's
    # name is its walreceiver's application_name, which synchronous_standby_names matches.
    conninfo = f"host=127.0.0.1 port={primary.port} user={SUPERUSER} application_name={name}"
    with (cluster.datadir / "postgresql.auto.conf").open("a") as fh:
        fh.write(f"port = {cluster.port}\nprimary_conninfo = '{conninfo}'\n")
    if _is_root():
        shutil.chown(cluster.datadir / "postgresql.auto.conf", user="postgres")
    cluster.start()
    standby = Standby(primary=primary, cluster=cluster, name=name, sync=sync)
    if sync:
        primary.psql("postgres", f"alter system set synchronous_standby_names = '\"{name}\"'")
        primary.psql("postgres", "alter system set synchronous_commit = 'on'")
        primary.psql("postgres", "select pg_reload_conf()")
        _poll(
            lambda: _one(
                primary,
                "select count(*) from pg_stat_replication"
                f" where application_name = '{name}' and sync_state = 'sync'",
            ),
            60,
            f"standby {name} to be synchronous",
        )
    standby.wait_caught_up()
    return standby


def both_hosts(first: LocalCluster, second: LocalCluster, dbname: str) -> str:
    """A connect string naming both servers of a side; whichever is primary serves."""
    return (
        f"host=127.0.0.1,127.0.0.1 port={first.port},{second.port} user={SUPERUSER}"
        f" dbname={dbname} target_session_attrs=read-write"
    )
