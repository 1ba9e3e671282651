"""A worker process killed in the middle of a chunked copy: its successor copies only the
chunks not recorded, and the table ends equal to the provider's.

The worker runs as an operator starts it, ``python -m pgferry leaf.ini worker``, in a child
process; a writer changes the provider's table the whole time.  Once a few chunks are
recorded in ``ferry_copy.range_done``, the test takes a SHARE lock on that table: a chunk
claims its range there first, so no further chunk can start or commit, and the set of
chunks recorded stays put while the process is sent SIGKILL.  The lock is then let go
(the stuck chunks' transactions find their client gone and roll back) and a new process is
started.  That the chunks recorded before the kill are not copied again is shown twice: the
rows of those chunks keep the id of the transaction that copied them (a copy started again
would truncate the table and write them anew), and the new process copies exactly the rows
of the other chunks.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pgferry.polling import wait_until as poll
from pgferry.testing.cascade import Ticker
from pgferry.testing.load import KeyChurn
from pgferry.testing.scenario import wait_until

ROWS = 200_000
CHUNK_ROWS = 5000
KILL_AFTER = 3  # chunks recorded before the kill
LEAF = {
    "copy_snapshot_max": "0",
    "copy_chunk_rows": str(CHUNK_ROWS),
    "exception_sleep": "0.2",
    "spark_warm": "false",  # the worker process starts no Spark for this
}
RECORDS = "select range_no, rows, xmin::text::bigint from ferry_copy.range_done"


def _start(ini: Path, log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pgferry", str(ini), "worker"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _sessions_gone(dsn: str) -> bool:
    """No connection of a pgferry worker or copy is left on ``dsn``'s database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pg_stat_activity where datname = current_database()"
            " and application_name like 'pgferry%%'"
        ).fetchone()
    return row is not None and row[0] == 0


@pytest.mark.slow  # two worker processes, 200,000 rows: about 15 s, more on a busy machine
def test_killed_worker_copies_only_the_remaining_chunks(make_pair, tmp_path: Path) -> None:
    pair = make_pair(**LEAF)
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int, s text)")
    pair.root(f"insert into t select g, 0, md5(g::text) from generate_series(1, {ROWS}) g")
    pair.root("analyze t")
    pair.cascade.add("rootnode", "public.t")
    ini, log = pair.cascade.paths["leafnode"], tmp_path / "worker.log"
    ticker = Ticker([pair.root_dsn], pair.queue)
    writer = KeyChurn(pair.root_dsn, ROWS + 2000, seed=11, every=0.005)
    procs: list[subprocess.Popen] = []
    ticker.start()
    writer.start()
    try:
        pair.cascade.add("leafnode", "public.t", copy_mode="chunked")
        procs.append(_start(ini, log))

        def recorded() -> bool:
            assert procs[0].poll() is None, log.read_text()
            # The copy makes ferry_copy on its destination when it starts.
            if pair.leaf("select to_regclass('ferry_copy.range_done')") == [(None,)]:
                return False
            return pair.leaf("select count(*) from ferry_copy.range_done")[0][0] >= KILL_AFTER

        # Polled often: the whole copy takes a few seconds.
        poll(recorded, timeout=120, interval=0.01, what=f"{KILL_AFTER} chunks recorded")
        with psycopg.connect(pair.leaf_dsn) as hold:
            # Waits for the chunks committing now; then none can claim its range.
            hold.execute("lock table ferry_copy.range_done in share mode")
            before = hold.execute(RECORDS).fetchall()
            planned = hold.execute("select count(*) from ferry_copy.chunk").fetchone()[0]
            os.kill(procs[0].pid, signal.SIGKILL)
            assert procs[0].wait(timeout=30) == -signal.SIGKILL
        assert KILL_AFTER <= len(before) < planned, (len(before), planned)
        assert pair.leaf("select merge_state from ferry.table_info") == [("in-copy",)]
        for dsn in (pair.leaf_dsn, pair.root_dsn):
            wait_until(lambda d=dsn: _sessions_gone(d), 60, "the killed worker's sessions to end")

        procs.append(_start(ini, log))
        state = "select merge_state from ferry.table_info"

        def copied() -> bool:
            assert procs[1].poll() is None, log.read_text()
            return pair.leaf(state) != [("in-copy",)]

        wait_until(copied, 120, "the copy to end")
        writer.stop()
        target = pair.tick()
        wait_until(
            lambda: pair.leaf(state) == [("ok",)] and (pair.last_tick() or 0) >= target,
            120,
            "the catch-up",
        )
    finally:
        writer.stop()
        ticker.stop()
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
    said = log.read_text()
    q = "select id, v, s from t order by id"
    assert pair.leaf(q) == pair.root(q)
    assert "resuming chunks" in said, said
    # The rows of each chunk recorded before the kill are still those its transaction
    # wrote (less the few the writer changed since): not truncated, not copied again.
    kept = dict(pair.leaf("select xmin::text::bigint, count(*) from t group by 1"))
    for chunk_no, rows, xid in before:
        assert kept.get(xid, 0) > rows // 2, (chunk_no, rows, kept.get(xid))
    # The successor copied the other chunks' rows only, and its count says so.
    done = re.findall(r"copy public\.t: (\d+) rows in chunks \((\d+) now\)", said)
    assert len(done) == 1, said
    total, now = map(int, done[0])
    assert now == total - sum(r[1] for r in before)
    assert writer.done > 0
    print(f"killed after {len(before)}/{planned} chunks; {now}/{total} rows copied after")
