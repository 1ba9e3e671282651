"""Shared ground for the replication benchmark: clusters, seed data, load, checks.

One :class:`Pair` is a throw-away root cluster and leaf cluster (free ports), each with the
walkthrough's database ``digoal_01`` and its four tables.  The seed load is the
walkthrough's pgbench pair (login + logout scripts, 2 + 2 clients, prepared statements);
the raw copy pipe is ``psql \\copy ... to stdout | psql \\copy ... from stdin``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from pgferry.db import connect
from pgferry.testing.cluster import LocalCluster, make_cluster

ANCHOR_DIR = Path(os.environ.get("PGFERRY_LONDISTE_ANCHOR", "/work/shared/anchors/londiste"))
DB = "digoal_01"
SCHEMA = "digoal_01"
TABLES = ("user_info", "user_session", "user_login_rec", "user_logout_rec")
SEQUENCES = ("user_login_rec_id_seq", "user_logout_rec_id_seq")

# The anchor measured Londiste on clusters with PostgreSQL's defaults (fsync, synchronous
# commit); the test clusters' speed-ups would flatter whichever side writes more.
DURABLE_SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "max_wal_size": "1GB",
    "max_connections": "100",
}

SCHEMA_SQL = """
create schema if not exists digoal_01;
create table digoal_01.user_info (userid int primary key, engname text, cnname text,
  occupation text, birthday date, signname text, email text, qq numeric,
  crt_time timestamp without time zone, mod_time timestamp without time zone);
create table digoal_01.user_session (userid int primary key,
  logintime timestamp(0) without time zone, login_count bigint default 0,
  logouttime timestamp(0) without time zone, online_interval interval default interval '0');
create table digoal_01.user_login_rec (userid int, login_time timestamp without time zone,
  ip inet, id bigserial primary key);
create table digoal_01.user_logout_rec (userid int, logout_time timestamp without time zone,
  ip inet, id bigserial primary key);
"""


def pg_tool(cluster: LocalCluster, name: str) -> str:
    """A client binary (psql, pgbench) of the cluster's PostgreSQL version.

    ``bindir`` may be a directory of symlinks to the server binaries only, so the tool is
    also looked for next to the resolved ``initdb``.
    """
    for folder in (cluster.bindir, Path(os.path.realpath(cluster.bindir / "initdb")).parent):
        if (folder / name).exists():
            return str(folder / name)
    found = shutil.which(name)
    if found is None:
        raise BenchError(f"{name} not found next to {cluster.bindir} nor on PATH")
    return found


def qualified(table: str) -> str:
    """``schema.table`` as the replication commands take it."""
    return f"{SCHEMA}.{table}"


def ident(table: str) -> sql.Composed:
    return sql.Identifier(SCHEMA, table)


class BenchError(RuntimeError):
    """A phase could not be measured; the message says why."""


def wait_for(what: str, check: Callable[[], bool], timeout: float, poll: float = 0.1) -> float:
    """Poll ``check`` until true; returns the seconds waited, raises BenchError on timeout."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
    return time.monotonic() - start


@dataclass
class Pair:
    """A root and a leaf cluster, both holding the walkthrough schema."""

    root: LocalCluster
    leaf: LocalCluster
    workdir: Path
    _conns: dict[str, psycopg.Connection] = field(default_factory=dict)

    def dsn(self, side: str) -> str:
        cluster = self.root if side == "root" else self.leaf
        return cluster.connstr(DB)

    def conn(self, side: str) -> psycopg.Connection:
        """A cached autocommit connection to ``root`` or ``leaf``."""
        conn = self._conns.get(side)
        if conn is None or conn.closed:
            conn = connect(self.dsn(side), autocommit=True, application_name="pgferry-bench")
            self._conns[side] = conn
        return conn

    def scalar(self, side: str, query, params: tuple = ()):
        row = self.conn(side).execute(query, params).fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def destroy(self) -> None:
        self.close()
        self.root.destroy()
        self.leaf.destroy()

    def finish(self, keep: bool, label: str, workdir: Path) -> None:
        """Keep the clusters for a look (``--keep``; connections closed), or destroy them."""
        if keep:
            print(f"[{label}] kept: {workdir}, clusters {self.root.base_dir} {self.leaf.base_dir}")
            self.close()
        else:
            self.destroy()


def make_pair(
    label: str, workdir: Path, durable: bool = True, extra: dict[str, str] | None = None
) -> Pair:
    """Both clusters; ``extra`` settings go to both (e.g. ``wal_level`` for native
    logical replication)."""
    settings = {**(DURABLE_SETTINGS if durable else {}), **(extra or {})}
    workdir.mkdir(parents=True, exist_ok=True)
    root = make_cluster(f"{label}-root", **settings)
    leaf = make_cluster(f"{label}-leaf", **settings)
    pair = Pair(root, leaf, workdir)
    for cluster in (root, leaf):
        with connect(cluster.connstr(), autocommit=True) as conn:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(DB)))
            conn.execute(
                sql.SQL("alter database {} set search_path = {}, public").format(
                    sql.Identifier(DB), sql.Identifier(SCHEMA)
                )
            )
        with connect(cluster.connstr(DB), autocommit=True) as conn:
            conn.execute(SCHEMA_SQL)
    return pair


def load_seed(pair: Pair, base_rows: int, log_rows: int) -> dict[str, int]:
    """The anchor's data: ``base_rows`` users and sessions, ``log_rows`` per log table."""
    conn = pair.conn("root")
    conn.execute(
        """
        insert into digoal_01.user_info (userid, engname, cnname, occupation, birthday,
               signname, email, qq, crt_time, mod_time)
        select g, 'digoal.zhou', '德哥', 'DBA', '1970-01-01',
               '公益是一辈子的事, I''m Digoal.Zhou, Just do it!', 'digoal@126.com', 276732431,
               clock_timestamp(), null
          from generate_series(1, %(n)s) g
        """,
        {"n": base_rows},
    )
    conn.execute(
        "insert into digoal_01.user_session (userid) select g from generate_series(1, %(n)s) g",
        {"n": base_rows},
    )
    for table, col in (("user_login_rec", "login_time"), ("user_logout_rec", "logout_time")):
        conn.execute(
            sql.SQL(
                "insert into {} (userid, {}, ip)"
                " select (random() * (%(n)s - 1))::int + 1, clock_timestamp(), inet '127.0.0.1'"
                " from generate_series(1, %(m)s)"
            ).format(ident(table), sql.Identifier(col)),
            {"n": base_rows, "m": log_rows},
        )
    conn.execute("vacuum analyze")
    return row_counts(pair, "root")


def row_counts(pair: Pair, side: str) -> dict[str, int]:
    return {
        t: pair.scalar(side, sql.SQL("select count(*) from only {}").format(ident(t)))
        for t in TABLES
    }


def checksums(pair: Pair, side: str) -> dict[str, list]:
    """Row count and a content checksum per table (the original compare's query)."""
    out = {}
    for t in TABLES:
        row = (
            pair.conn(side)
            .execute(
                sql.SQL(
                    "select count(*), coalesce(sum(hashtext(t::text)::bigint), 0) from only {} t"
                ).format(ident(t))
            )
            .fetchone()
        )
        out[t] = [int(row[0]), int(row[1])]
    return out


def compare_sides(pair: Pair) -> dict:
    """Counts and checksums of both sides; ``equal`` is true when all four tables match."""
    root, leaf = checksums(pair, "root"), checksums(pair, "leaf")
    diff = [t for t in TABLES if root[t] != leaf[t]]
    return {"equal": not diff, "differing": diff, "root": root, "leaf": leaf}


# --- the seed load ------------------------------------------------------------------------

_TPS = re.compile(r"^tps = ([0-9.]+) \(without", re.M)
_TX = re.compile(r"^number of transactions actually processed: (\d+)", re.M)


class Load:
    """The two concurrent pgbench runs of the walkthrough against the root."""

    def __init__(self, pair: Pair, seconds: int, outdir: Path, tag: str) -> None:
        self.pair = pair
        self.seconds = seconds
        self.outdir = outdir
        self.tag = tag
        self.procs: list[subprocess.Popen] = []
        self.files: list[Path] = []

    def start(self) -> Load:
        root = self.pair.root
        pgbench = pg_tool(root, "pgbench")
        for script in ("login", "logout"):
            out = self.outdir / f"pgbench_{self.tag}_{script}.txt"
            self.files.append(out)
            cmd = [
                pgbench,
                "-h", "127.0.0.1",
                "-p", str(root.port),
                "-U", "postgres",
                "-M", "prepared",
                "-n", "-r",
                "-c", "2", "-j", "2",
                "-T", str(self.seconds),
                "-f", str(ANCHOR_DIR / "sql" / f"{script}.sql"),
                DB,
            ]  # fmt: skip
            with out.open("w") as fh:
                self.procs.append(
                    subprocess.Popen(
                        cmd, stdout=fh, stderr=subprocess.STDOUT, preexec_fn=_default_sigint
                    )
                )
        return self

    def wait(self) -> dict:
        """Wait for both runs; transactions and tps (sum of both, without connection time)."""
        for proc in self.procs:
            proc.wait()
        tps = tx = 0.0
        for path in self.files:
            text = path.read_text()
            m_tps, m_tx = _TPS.search(text), _TX.search(text)
            if not (m_tps and m_tx):
                tail = text.strip().splitlines()[-1:] or ["no output"]
                raise BenchError(f"pgbench failed ({path.name}): {tail[0]}")
            tps += float(m_tps.group(1))
            tx += int(m_tx.group(1))
        return {"tps": round(tps, 1), "transactions": int(tx), "two_per_tx": int(2 * tx)}

    def stop(self) -> None:
        """End runs started with a long -T (busy-queue copy): they stop at once."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _default_sigint() -> None:
    """In pgbench: SIGINT ends it (stop()) even when the benchmark itself was started in the
    background of a shell, which starts it with SIGINT ignored, and children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def rows_changed(pair: Pair) -> int:
    """Rows inserted, updated and deleted so far in the four tables of the root."""
    conn = pair.conn("root")
    conn.execute("select pg_stat_clear_snapshot()")
    return int(
        conn.execute(
            "select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)"
            " from pg_stat_user_tables where schemaname = %s and relname = any(%s)",
            (SCHEMA, list(TABLES)),
        ).fetchone()[0]
    )


def settled_rows_changed(pair: Pair, timeout: float = 10) -> int:
    """:func:`rows_changed` once the finished clients' statistics have all arrived.

    Backends report their counts when they exit, a moment after the client is gone.
    """
    seen = [rows_changed(pair)]

    def stable() -> bool:
        time.sleep(0.25)
        seen.append(rows_changed(pair))
        return seen[-1] == seen[-2] == seen[-3] if len(seen) >= 3 else False

    wait_for("table statistics", stable, timeout, poll=0)
    return seen[-1]


def run_load(pair: Pair, seconds: int, outdir: Path, tag: str) -> dict:
    """The seed load for ``seconds``; ``events`` = rows it changed (one event per row).

    Every transaction changes two rows while ``user_session`` holds all 200,000 user ids
    the scripts pick from; with fewer rows (``--quick``) some updates find no row.
    """
    pair.conn("root").execute("checkpoint")
    before = settled_rows_changed(pair)
    result = Load(pair, seconds, outdir, tag).start().wait()
    result["events"] = settled_rows_changed(pair) - before
    return result


# --- raw copy pipe --------------------------------------------------------------------------


def raw_pipe(pair: Pair, tables: tuple[str, ...] = TABLES) -> dict:
    """Seconds for the tables (default: the four) through the psql pipe, one after
    another, PK kept.

    The leaf tables are emptied first; ``session_replication_role = replica`` keeps a
    leftover write guard trigger from refusing the rows (no trigger fires otherwise).
    """
    psql = pg_tool(pair.root, "psql")
    env = dict(os.environ, PGOPTIONS="-c session_replication_role=replica")
    total = 0.0
    per_table = {}
    for t in tables:
        name = qualified(t)
        leaf = pair.conn("leaf")
        leaf.execute("set session_replication_role = replica")
        leaf.execute(sql.SQL("truncate {}").format(ident(t)))
        leaf.execute("reset session_replication_role")
        out_cmd = [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pair.dsn("root")]
        in_cmd = [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pair.dsn("leaf")]
        start = time.monotonic()
        src = subprocess.Popen(
            [*out_cmd, "-c", f"\\copy (select * from {name}) to stdout"],
            stdout=subprocess.PIPE,
            env=env,
        )
        dst = subprocess.run(
            [*in_cmd, "-c", f"\\copy {name} from stdin"],
            stdin=src.stdout,
            capture_output=True,
            text=True,
            env=env,
        )
        assert src.stdout is not None
        src.stdout.close()
        src.wait()
        elapsed = time.monotonic() - start
        if src.returncode or dst.returncode:
            raise BenchError(f"raw pipe of {name} failed: {dst.stderr.strip()[:200]}")
        per_table[t] = round(elapsed, 3)
        total += elapsed
    return {"seconds": round(total, 3), "per_table": per_table}
