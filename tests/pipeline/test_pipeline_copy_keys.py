"""A copy's keys: dropped for the load into a table it emptied, where safe, and built again.

The chunked copy runs here directly (``copy_chunked``, no node); what the destination's
catalog holds is read while its chunks are copied, by wrapping the function that copies one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from pipeline_sql import fetch, one, run_sql

from pgferry import schema
from pgferry.errors import DatabaseError
from pgferry.pipeline.copy import CopyTask, chunked, copy_tables
from pgferry.polling import wait_until
from pgferry.registry import catalog

ROWS = 2000
CHUNK_ROWS = 200
# The table's keys, indexes and NOT NULLs as the catalog describes them.
SHAPE = """
select 'constraint', conname::text, pg_get_constraintdef(oid) from pg_constraint
 where conrelid = %(t)s::text::regclass
union all
select 'index', indexname::text, indexdef from pg_indexes
 where schemaname = 'public' and tablename = %(t)s::text
union all
select 'not null', attname::text, attnotnull::text from pg_attribute
 where attrelid = %(t)s::text::regclass and attnum > 0
order by 1, 2, 3
"""
KEYS = (
    "select conname from pg_constraint where conrelid = %s::regclass"
    " and contype in ('p', 'u') order by 1"
)


def _table(src: str, dst: str, ddl: str, *extra: str) -> None:
    for side in (src, dst):
        run_sql(side, ddl, *extra)
    run_sql(src, f"insert into t select g, g % 7, md5(g::text) from generate_series(1, {ROWS}) g")


def _watching(monkeypatch, dst: str, table: str = "t") -> list[list[tuple]]:
    """The keys of ``table`` on ``dst`` as each chunk starts, recorded by the copy's streams."""
    seen: list[list[tuple]] = []
    real = chunked._copy_chunk

    def watched(job, plan_no, chunk_no, where, src, dst_conn):
        seen.append(fetch(dst, KEYS, (table,)))
        return real(job, plan_no, chunk_no, where, src, dst_conn)

    monkeypatch.setattr(chunked, "_copy_chunk", watched)
    return seen


def _copy(src: str, dst: str, copy_id: str | None = None, resume: bool = False) -> dict:
    return chunked.copy_chunked(
        src, dst, [CopyTask("public.t", "public.t")], copy_id=copy_id or uuid.uuid4().hex,
        chunk_rows=CHUNK_ROWS, resume=resume,
    )  # fmt: skip


def _exact(src: str, dst: str) -> None:
    q = "select id, v, s from t order by id"
    assert fetch(dst, q) == fetch(src, q)


def test_keys_are_dropped_for_the_load_and_back_after(both, monkeypatch) -> None:
    src, dst = both
    _table(
        src, dst,
        "create table t (id int constraint t_key primary key, v int, s text,"
        " constraint t_s_id unique (s, id) include (v))",
        "create index t_v on t (v)",
        "alter table t add constraint t_v_only unique (v, s)",  # not the source's key: stays
    )  # fmt: skip
    before = fetch(dst, SHAPE, {"t": "t"})
    seen = _watching(monkeypatch, dst)
    assert _copy(src, dst) == {"public.t": ROWS}
    assert seen and all(keys == [("t_v_only",)] for keys in seen)
    assert fetch(dst, SHAPE, {"t": "t"}) == before  # same names, same definitions
    assert one(dst, "select count(*) from ferry_copy.saved_index") == 0
    _exact(src, dst)


def test_a_resume_after_a_kill_builds_the_key(both, tmp_path: Path) -> None:
    """The copy's process sent SIGKILL with the key dropped and some chunks in: the
    resumed copy copies the others, exactly, and ends with the key."""
    src, dst = both
    _table(src, dst, "create table t (id int primary key, v int, s text)")
    copy_id = uuid.uuid4().hex
    child = (
        "import sys; from pgferry.pipeline.copy import CopyTask, chunked;"
        " chunked.copy_chunked(sys.argv[1], sys.argv[2], [CopyTask('public.t', 'public.t')],"
        f" copy_id={copy_id!r}, chunk_rows={CHUNK_ROWS}, parallel=1)"
    )
    with psycopg.connect(dst) as conn:
        schema.install(conn, ("copy",))
    done = "select count(*) from ferry_copy.range_done"
    log = tmp_path / "copy.log"
    with psycopg.connect(dst) as hold:
        # Chunk 3's record, not committed: the copy's one stream, claiming it after
        # chunks 0 to 2, waits there until the kill.
        hold.execute(
            "insert into ferry_copy.range_done (copy_id, dest_table, range_no)"
            " values (%s, 'public.t', 3)",
            (copy_id,),
        )
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-c", child, src, dst], stdout=out, stderr=out)
        try:

            def waiting() -> bool:
                assert proc.poll() is None, log.read_text()
                return one(dst, done) == 3

            wait_until(waiting, timeout=60, interval=0.01, what="3 chunks recorded")
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        hold.rollback()
    assert fetch(dst, KEYS, ("t",)) == []  # the key is not there meanwhile, but recorded
    assert fetch(
        dst, "select index_name, constraint_type, key_columns from ferry_copy.saved_index"
    ) == [("t_pkey", "p", ["id"])]
    with psycopg.connect(dst) as conn:  # what the node's checks see: the key to come
        assert catalog.primary_key(conn, "public.t") == ["id"]
    assert _copy(src, dst, copy_id, resume=True) == {"public.t": ROWS}
    assert fetch(dst, KEYS, ("t",)) == [("t_pkey",)]
    _exact(src, dst)


def test_a_referenced_key_stays_during_the_copy(both, monkeypatch) -> None:
    src, dst = both
    _table(src, dst, "create table t (id int primary key, v int, s text)")
    for side in (src, dst):
        run_sql(side, "create table child (id int primary key, t_id int references t)")
    seen = _watching(monkeypatch, dst)
    # Copied together: a TRUNCATE of t alone fails while child references it.
    chunked.copy_chunked(
        src, dst, [CopyTask("public.t", "public.t"), CopyTask("public.child", "public.child")],
        copy_id=uuid.uuid4().hex, chunk_rows=CHUNK_ROWS,
    )  # fmt: skip
    assert seen and all(keys == [("t_pkey",)] for keys in seen)
    _exact(src, dst)


@pytest.mark.parametrize(
    "unsafe",
    [
        (
            "alter table t drop constraint t_pkey",
            "alter table t add constraint t_pkey primary key (id) deferrable",
        ),
        ("alter table t replica identity using index t_pkey",),
        ("comment on constraint t_pkey on t is 'the key'",),
        ("create view v as select id, s from t group by id",),  # needs the key
    ],
    ids=["deferrable", "replica-identity", "comment", "view"],
)
def test_a_key_unsafe_to_drop_stays(both, monkeypatch, unsafe: tuple[str, ...]) -> None:
    src, dst = both
    _table(src, dst, "create table t (id int primary key, v int, s text)")
    run_sql(dst, *unsafe)
    seen = _watching(monkeypatch, dst)
    _copy(src, dst)
    assert seen and all(keys == [("t_pkey",)] for keys in seen)
    _exact(src, dst)


def test_a_partition_keeps_its_key(both, monkeypatch) -> None:
    src, dst = both
    _table(src, dst, "create table t (id int primary key, v int, s text)")
    run_sql(
        dst,
        "drop table t",
        "create table p (id int primary key, v int, s text) partition by range (id)",
        f"create table t partition of p for values from (0) to ({ROWS + 1})",
    )
    seen = _watching(monkeypatch, dst)
    _copy(src, dst)
    assert seen and all(keys == [("t_pkey",)] for keys in seen)
    _exact(src, dst)


def test_a_key_that_cannot_be_built_fails_the_copy_in_one_line(both, monkeypatch) -> None:
    """Duplicates written beside the copy: its end says so, the key stays recorded, and
    the next copy, which empties the table, builds it."""
    src, dst = both
    _table(src, dst, "create table t (id int primary key, v int, s text)")
    real = chunked._copy_chunk
    once = threading.Lock()

    def doubled(job, plan_no, chunk_no, where, src_conn, dst_conn):
        if once.acquire(blocking=False):
            run_sql(dst, "insert into t values (1, 0, 'x'), (1, 0, 'y')")
        return real(job, plan_no, chunk_no, where, src_conn, dst_conn)

    monkeypatch.setattr(chunked, "_copy_chunk", doubled)
    with pytest.raises(DatabaseError) as failed:
        _copy(src, dst)
    message = str(failed.value)
    assert "\n" not in message
    assert "copy of public.t: could not build its primary key t_pkey again:" in message
    assert "could not create unique index" in message
    assert fetch(dst, "select index_name from ferry_copy.saved_index") == [("t_pkey",)]
    monkeypatch.setattr(chunked, "_copy_chunk", real)
    _copy(src, dst)
    assert fetch(dst, KEYS, ("t",)) == [("t_pkey",)]
    _exact(src, dst)


def test_one_snapshot_copy_drops_the_key_only_when_copied_as_it_is(both) -> None:
    """The one-snapshot copy shares this; a key computed by an expression could repeat."""
    src, dst = both
    _table(src, dst, "create table t (id int primary key, v int, s text)")
    task = CopyTask("public.t", "public.t", column_exprs=(("id", "id % 10"),))
    with pytest.raises(DatabaseError, match="duplicate key value violates unique constraint"):
        copy_tables(lambda: None, src, dst, [task])  # fails at once: the key stayed
    assert fetch(dst, "select count(*) from ferry_copy.saved_index") == [(0,)]
    copy_tables(lambda: None, src, dst, [CopyTask("public.t", "public.t")])
    assert fetch(dst, KEYS, ("t",)) == [("t_pkey",)]
    _exact(src, dst)
