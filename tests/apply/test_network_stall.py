"""A provider whose network stops answering: the worker notices within the bound its
connect string sets, logs one line naming the provider, and goes on when the path heals,
with nothing lost or doubled.

The root's cluster runs in a network namespace behind a veth pair
(:mod:`pgferry.testing.netpath`); the stall sets the namespace's end of the pair down, so
the kernel drops every packet to it: no reset, no ICMP error, nothing refused, as a dead
switch or a silent firewall would.  (A userspace proxy that stops forwarding would not do:
its kernel keeps acknowledging, so TCP keepalives never fire and only the proxy's buffers
filling would ever stall a write.)

The leaf's ``remote_extra_connstr`` sets the libpq keywords small, as an operator would for
a tighter bound than :data:`pgferry.db.NETWORK_DEFAULTS`: keepalives after 1 s idle, every
1 s, and a TCP user timeout of 2 s.  A writer and the ticker keep working on the root the
whole time (their connections cross the same path and break too), so the stall hits a
worker in the middle of replay; the other tests stall it in the middle of a chunked copy
and of a one-snapshot copy.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg
import pytest

from pgferry.apply.worker import Worker
from pgferry.config import Config
from pgferry.testing import netpath
from pgferry.testing.cascade import Cascade, sql_rows
from pgferry.testing.load import Load
from pgferry.testing.scenario import wait_until

_CANNOT = netpath.available()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_CANNOT is not None, reason=str(_CANNOT))]

SHORT = "keepalives_idle=1 keepalives_interval=1 keepalives_count=2 tcp_user_timeout=2000"
# keepalives_idle + tcp_user_timeout, the worker's loop_delay and a margin for a busy machine
BOUND = 1 + 2 + 0.1 + 4


@pytest.fixture
def path():
    made = netpath.NetPath().create()
    try:
        cluster = made.cluster()
    except BaseException:
        made.destroy()
        raise
    yield made, cluster
    made.heal()
    cluster.destroy()
    made.destroy()


def _writes(dsn: str, table: str = "public.t") -> Load:
    """One row per unit, its id from the root's sequence: a unit repeated after a broken
    connection is a new row, never the same one twice."""
    insert_row = f"insert into {table} (v) values (%s)"

    def insert(conn, done: int) -> None:
        conn.execute(insert_row, (f"w{done}",))

    return Load(f"{dsn} {SHORT} connect_timeout=2", insert, every=0.01, transaction=False)


def _ticks(dsn: str, queue: str) -> Load:
    def tick(conn, _done: int) -> None:
        conn.execute("select ferry_queue.force_tick(%s)", (queue,))
        conn.execute("select ferry_queue.ticker(%s)", (queue,))

    return Load(f"{dsn} {SHORT} connect_timeout=2", tick, every=0.2, transaction=False)


def _pair(cluster, db_b: str, tmp_path, **leaf: str) -> tuple[Cascade, str, Config]:
    """A root in the namespace, a leaf on cluster B whose provider connections have the
    short timeouts; the leaf's table ``public.t`` copied (empty) and replayed."""
    root_dsn = cluster.createdb("stallroot")
    cascade = Cascade("stallq", tmp_path)
    cascade.node("rootnode", root_dsn, "root", job_name="stallroot")
    leaf_cfg = cascade.node(
        "leafnode", db_b, "leaf", "rootnode", job_name="stallleaf",
        remote_extra_connstr=f"{SHORT} connect_timeout=2", **leaf,
    )  # fmt: skip
    for dsn in (root_dsn, db_b):
        sql_rows(dsn, "create table public.t (id bigserial primary key, v text not null)")
    cascade.add("rootnode", "public.t")
    cascade.add("leafnode", "public.t")
    cascade.workers["leafnode"] = Worker(leaf_cfg)
    cascade.catch_up("leafnode")
    cascade.workers.pop("leafnode").shutdown()
    return cascade, root_dsn, leaf_cfg


def test_a_stalled_provider_is_noticed_and_replay_goes_on(path, db_b, tmp_path, caplog) -> None:
    net, cluster = path
    cascade, root_dsn, leaf_cfg = _pair(cluster, db_b, tmp_path)

    caplog.set_level(logging.INFO)
    worker = Worker(Config(leaf_cfg.path, leaf_cfg.section, dict(leaf_cfg.values)))
    loop = threading.Thread(target=worker.run_forever, daemon=True)
    writer, ticker = _writes(root_dsn), _ticks(root_dsn, cascade.queue)
    writer.start()
    ticker.start()
    loop.start()
    try:
        wait_until(lambda: _count(db_b) > 200, 60, "replay before the stall")
        net.stall()
        stalled = time.time()
        notice = _wait_notice(caplog, net.far_addr, 60)
        noticed = notice.created - stalled  # when the line was logged
        assert noticed < BOUND, f"noticed after {noticed:.1f}s"
        assert "\n" not in notice.getMessage() and not notice.exc_info, repr(notice.getMessage())
        assert loop.is_alive()
        _failed_again(caplog, net.far_addr, notice)  # a reconnect fails on the path down
        net.heal()
        healed_at = writer.done
        wait_until(lambda: writer.done > healed_at + 100, 60, "the writer after the heal")
        writer.stop()
        target = cascade.tick()
        wait_until(
            lambda: (cascade.last_tick("leafnode") or 0) >= target, 60, "replay after the heal"
        )
    finally:
        writer.stop()
        ticker.stop()
        worker.stopping = True
        loop.join(timeout=60)
    assert not loop.is_alive(), "the worker did not stop"
    said = [r.getMessage() for r in caplog.records if r.name == "pgferry.daemon"]
    assert all("\n" not in line for line in said), said
    query = "select id, v from public.t order by id"
    rows = sql_rows(root_dsn, query)
    assert len(rows) > 300
    assert sql_rows(db_b, query) == rows
    print(f"stall noticed after {noticed:.2f}s: {notice.getMessage()}")


def _count(dsn: str) -> int:
    return sql_rows(dsn, "select count(*) from public.t")[0][0]


def _wait_notice(
    caplog, host: str, timeout: float, about: str = "", level: int = logging.ERROR
) -> logging.LogRecord:
    """The first line of ``level`` or above naming ``host`` (and ``about``: a copy's)."""
    found: list[logging.LogRecord] = []

    def seen() -> bool:
        found[:] = [
            r
            for r in caplog.records
            if r.levelno >= level and host in r.getMessage() and about in r.getMessage()
        ]
        return bool(found)

    wait_until(seen, timeout, f"an error naming {host}")
    return found[0]


def _failed_again(caplog, host: str, after: logging.LogRecord, timeout: float = 60) -> None:
    """Wait for a line logged after ``after`` naming ``host`` again: pgferry tried again
    while the path was down, and that failed too."""

    def again() -> bool:
        return any(
            r.created > after.created and r.levelno >= logging.WARNING and host in r.getMessage()
            for r in caplog.records
        )

    wait_until(again, timeout, f"a second failure naming {host}")


def test_a_stall_mid_copy_resumes_the_chunks(path, db_b, tmp_path, caplog) -> None:
    """A chunked copy whose source stalls between or inside chunks fails within the bound
    naming the source, is tried again, and after the heal goes on with the chunks not
    done: the table ends equal to the source's."""
    net, cluster = path
    cascade, root_dsn, leaf_cfg = _pair(cluster, db_b, tmp_path, copy_chunk_rows="5000")
    rows = 200_000
    sql_rows(root_dsn, "create table public.c (id bigint primary key, v text not null)")
    sql_rows(
        root_dsn, f"insert into public.c select i, md5(i::text) from generate_series(1, {rows}) i"
    )
    sql_rows(root_dsn, "analyze public.c")
    sql_rows(db_b, "create table public.c (id bigint primary key, v text not null)")
    cascade.add("rootnode", "public.c")

    caplog.set_level(logging.INFO)
    worker = Worker(Config(leaf_cfg.path, leaf_cfg.section, dict(leaf_cfg.values)))
    loop = threading.Thread(target=worker.run_forever, daemon=True)
    ticker = _ticks(root_dsn, cascade.queue)
    ticker.start()
    loop.start()
    try:
        cascade.add("leafnode", "public.c", copy_mode="chunked")
        done = "select count(*) from ferry_copy.range_done where dest_table <> 'public.t'"
        wait_until(lambda: sql_rows(db_b, done)[0][0] >= 2, 60, "a few chunks copied")
        net.stall()
        stalled = time.time()
        chunks_then = sql_rows(db_b, done)[0][0]
        notice = _wait_notice(caplog, net.far_addr, 60)
        noticed = notice.created - stalled
        assert noticed < BOUND, f"noticed after {noticed:.1f}s"
        assert "\n" not in notice.getMessage() and not notice.exc_info
        _failed_again(caplog, net.far_addr, notice)  # the copy's retry fails on the path down
        net.heal()
        cascade.wait_for(lambda: cascade.pending("leafnode") == 0, 60, "the copy after the heal")
    finally:
        ticker.stop()
        worker.stopping = True
        loop.join(timeout=60)
    assert not loop.is_alive(), "the worker did not stop"
    query = "select id, v from public.c order by id"
    assert sql_rows(db_b, query) == sql_rows(root_dsn, query)
    assert chunks_then < rows // 5000, "the copy was over before the stall"
    said = [r.getMessage() for r in caplog.records]
    assert any("resuming chunks" in line for line in said), "the copy started again from zero"
    print(f"copy stall noticed after {noticed:.2f}s: {notice.getMessage()}")


def test_a_stall_mid_snapshot_copy_copies_again(path, db_b, tmp_path, caplog) -> None:
    """A one-snapshot copy whose source stalls while its snapshot is held fails within the
    bound naming the source, in one line, and is made again after the heal under a new
    snapshot; its catch-up replays the writes made meanwhile: nothing lost or doubled.

    The copy is held at its first range by a lock on the destination's range records, so
    that the stall falls between the snapshot's export and the end of the copy whatever
    the machine's speed; the lock is let go as the path goes down."""
    net, cluster = path
    cascade, root_dsn, leaf_cfg = _pair(cluster, db_b, tmp_path)
    table = "create table public.c (id bigserial primary key, v text not null)"
    sql_rows(root_dsn, table)
    # Small enough for threads of the worker (no Spark): copy.LOCAL_PAGES.
    sql_rows(
        root_dsn, "insert into public.c (v) select md5(i::text) from generate_series(1, 20000) i"
    )
    sql_rows(root_dsn, "analyze public.c")
    sql_rows(db_b, table)
    cascade.add("rootnode", "public.c")

    caplog.set_level(logging.INFO)
    worker = Worker(Config(leaf_cfg.path, leaf_cfg.section, dict(leaf_cfg.values)))
    loop = threading.Thread(target=worker.run_forever, daemon=True)
    writer, ticker = _writes(root_dsn, "public.c"), _ticks(root_dsn, cascade.queue)
    hold = psycopg.connect(db_b)
    try:
        hold.execute("lock table ferry_copy.range_done in share mode")
        writer.start()
        ticker.start()
        loop.start()
        cascade.add("leafnode", "public.c", copy_mode="snapshot")
        waiting = (
            "select count(*) from pg_stat_activity where datname = current_database()"
            " and wait_event_type = 'Lock' and query like '%%ferry_copy.range_done%%'"
        )
        wait_until(lambda: sql_rows(db_b, waiting)[0][0] > 0, 60, "the copy at its first range")
        assert cascade.pending("leafnode") == 1
        net.stall()
        stalled = time.time()
        hold.rollback()
        # The copy's own line: its tasks failed, the source named (a warning: retried).
        notice = _wait_notice(caplog, net.far_addr, 60, "copy public.c", logging.WARNING)
        noticed = notice.created - stalled
        assert noticed < BOUND, f"noticed after {noticed:.1f}s"
        assert "\n" not in notice.getMessage() and not notice.exc_info, repr(notice.getMessage())
        _failed_again(caplog, net.far_addr, notice)  # a retry fails on the path down
        net.heal()
        cascade.wait_for(lambda: cascade.pending("leafnode") == 0, 120, "the copy after the heal")
        writer.stop()
        target = cascade.tick()
        wait_until(
            lambda: (cascade.last_tick("leafnode") or 0) >= target, 60, "replay after the heal"
        )
    finally:
        hold.close()
        writer.stop()
        ticker.stop()
        worker.stopping = True
        loop.join(timeout=60)
    assert not loop.is_alive(), "the worker did not stop"
    query = "select id, v from public.c order by id"
    rows = sql_rows(root_dsn, query)
    assert len(rows) > 20000 and writer.done > 0
    assert sql_rows(db_b, query) == rows
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert all("\n" not in line for line in said), said
    print(f"snapshot copy stall noticed after {noticed:.2f}s: {notice.getMessage()}")
