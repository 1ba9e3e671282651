"""A copy by a role that lacks a right it needs stops before it changes anything.

The copy empties the table, drops its indexes and keys, commits its rows chunk by chunk and
builds the indexes again at the end: a role that may do the first steps but not the last
would leave the table without its primary key.  Each case runs the chunked copy (no Spark)
as an ordinary role on the destination, with one right missing, then with it granted.
"""

from __future__ import annotations

import uuid

import pytest
from pipeline_sql import fetch, run_sql

from pgferry import schema
from pgferry.db import connect
from pgferry.errors import DatabaseError
from pgferry.pipeline.copy import CopyTask, chunked, copy_tables

ROWS = 500
KEYS = (
    "select conname from pg_constraint where conrelid = 'app.t'::regclass"
    " and contype in ('p', 'u') order by 1"
)
ROWS_SQL = "select id, v from app.t order by id"


def _as(connstr: str, role: str) -> str:
    assert " user=postgres " in f" {connstr} "
    return f" {connstr} ".replace(" user=postgres ", f" user={role} ").strip()


def _setup(src: str, dst: str, role: str, owner: bool) -> None:
    """``app.t`` on both sides; on the destination the role may use the copy's bookkeeping,
    owns the table or has INSERT and TRUNCATE on it, and has no CREATE on schema app."""
    for side in (src, dst):
        run_sql(side, "create schema app", "create table app.t (id int primary key, v int)")
    run_sql(src, f"insert into app.t select g, g from generate_series(1, {ROWS}) g")
    run_sql(dst, "insert into app.t values (1, -1), (2, -2)")  # what must stay as it is
    with connect(dst, autocommit=True) as conn:
        schema.install(conn, ("copy",))
    run_sql(
        dst,
        f"create role {role} login",
        f"grant set on parameter session_replication_role to {role}",
        f"grant usage on schema app, ferry_copy to {role}",
        f"grant select, insert, update, delete on all tables in schema ferry_copy to {role}",
        f"grant usage on all sequences in schema ferry_copy to {role}",
        f"alter table app.t owner to {role}" if owner
        else f"grant select, insert, truncate on app.t to {role}",
    )  # fmt: skip
    run_sql(src, f"create role {role} login", f"grant usage on schema app to {role}",
            f"grant select on app.t to {role}")  # fmt: skip


def _copy(src: str, dst: str, one_snapshot: bool = False) -> dict:
    """The chunked copy, or the one-snapshot copy (small: on the driver's threads)."""
    if one_snapshot:
        return copy_tables(lambda: None, src, dst, [CopyTask("app.t", "app.t")]).rows
    return chunked.copy_chunked(
        src, dst, [CopyTask("app.t", "app.t")], copy_id=uuid.uuid4().hex, chunk_rows=100
    )


@pytest.mark.parametrize(
    ("owner", "lacking", "grant"),
    [
        (True, "lacks CREATE on schema app (the indexes are built again after the load)",
         "grant create on schema app to {role}"),
        (False, "lacks ownership of the table (its indexes are dropped for the load)",
         "alter table app.t owner to {role}; grant create on schema app to {role}"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("one_snapshot", [False, True], ids=["chunked", "one snapshot"])
def test_a_copy_without_a_right_it_needs_changes_nothing(
    both, owner: bool, lacking: str, grant: str, one_snapshot: bool
) -> None:
    src, dst = both
    role = f"copier_{uuid.uuid4().hex[:10]}"
    _setup(src, dst, role, owner)
    before = fetch(dst, ROWS_SQL)
    with pytest.raises(DatabaseError) as failed:
        _copy(_as(src, role), _as(dst, role), one_snapshot)
    message = str(failed.value)
    assert "\n" not in message
    assert f"copy of app.t: role {role} {lacking}; nothing was changed" in message
    assert fetch(dst, KEYS) == [("t_pkey",)]
    assert fetch(dst, ROWS_SQL) == before
    assert fetch(dst, "select count(*) from ferry_copy.saved_index") == [(0,)]
    run_sql(dst, grant.format(role=role))
    assert _copy(_as(src, role), _as(dst, role), one_snapshot) == {"app.t": ROWS}
    assert fetch(dst, KEYS) == [("t_pkey",)]
    assert fetch(dst, ROWS_SQL) == fetch(src, ROWS_SQL)


@pytest.mark.parametrize(
    ("revoke", "lacking"),
    [
        ("revoke truncate on app.t from {role}", "lacks TRUNCATE on the table"),
        ("revoke set on parameter session_replication_role from {role}",
         "lacks the right to set session_replication_role"),
    ],
)  # fmt: skip
def test_a_copy_without_truncate_or_replica_changes_nothing(
    both, revoke: str, lacking: str
) -> None:
    src, dst = both
    role = f"copier_{uuid.uuid4().hex[:10]}"
    _setup(src, dst, role, owner=False)
    run_sql(dst, revoke.format(role=role))
    with pytest.raises(DatabaseError, match=f"role {role} {lacking}"):
        _copy(_as(src, role), _as(dst, role))
    assert fetch(dst, ROWS_SQL) == [(1, -1), (2, -2)]
    assert fetch(dst, KEYS) == [("t_pkey",)]
