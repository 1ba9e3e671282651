"""scripts/ddl_check.py: which captured statements a subscriber runs, read from the parse
tree alone (no server): one statement of the captured kinds, and the table it is on."""

from __future__ import annotations

import pytest

from pgferry.scripts.attrs import ScriptAttrs
from pgferry.scripts.ddl_capture import is_captured
from pgferry.scripts.ddl_check import DdlRefused, captured_table

pytestmark = pytest.mark.pure

LOCAL_T = ScriptAttrs({"local-table": ["app.t"]})


@pytest.mark.parametrize(
    ("text", "attrs", "table"),
    [
        ("alter table app.t add column c int default 1", ScriptAttrs(), "app.t"),
        ("ALTER TABLE ONLY app.t ALTER c TYPE bigint USING c * 2", ScriptAttrs(), "app.t"),
        ("alter table t add constraint p check (c > 0) no inherit", ScriptAttrs(), "public.t"),
        ('alter table app."T é" rename column c to d', ScriptAttrs(), 'app."T é"'),
        ("alter table app.t rename constraint a to b", ScriptAttrs(), "app.t"),
        ("alter table app.t rename to t2", ScriptAttrs(), "app.t"),
        ("alter table app.t set schema app2", ScriptAttrs(), "app.t"),
        ("comment on column app.t.c is 'x'", ScriptAttrs(), "app.t"),
        ("comment on table app.t is null", ScriptAttrs(), "app.t"),
        ("create unique index t_c on app.t (lower(c))", ScriptAttrs(), "app.t"),
        ("drop index app.t_c", LOCAL_T, "app.t"),
    ],
)  # fmt: skip
def test_captured_kinds_and_their_table(text: str, attrs: ScriptAttrs, table: str) -> None:
    assert captured_table(text, attrs) == table


@pytest.mark.parametrize(
    ("text", "attrs", "why"),
    [
        ("alter table app.t add c int; alter role app superuser", ScriptAttrs(), "2 statements"),
        ("alter table app.t add column €$q$x int; select 1", ScriptAttrs(), "2 statements"),
        ("do $$ begin null; end $$", ScriptAttrs(), "DoStmt"),
        ("select app.f()", ScriptAttrs(), "SelectStmt"),
        ("alter role app superuser", ScriptAttrs(), "AlterRoleStmt"),
        ("alter table app.t owner to app", ScriptAttrs(), "OWNER TO"),
        ("alter table app.t add c int, disable trigger all", ScriptAttrs(), "DISABLE TRIGGER ALL"),
        ("alter table app.t enable replica trigger x", ScriptAttrs(), "ENABLE REPLICA TRIGGER"),
        ("alter table app.t disable rule r", ScriptAttrs(), "DISABLE RULE"),
        ("alter table app.t force row level security", ScriptAttrs(), "FORCE ROW LEVEL"),
        ("alter table app.t attach partition app.x for values in (1)", ScriptAttrs(), "ATTACH"),
        ("alter table app.t inherit app.parent", ScriptAttrs(), "INHERIT"),
        ("alter index app.i rename to j", ScriptAttrs(), "RenameStmt"),
        ("alter view app.v rename column a to b", ScriptAttrs(), "column of something other"),
        ("alter sequence app.s owned by none", ScriptAttrs(), "AlterSeqStmt"),
        ("comment on function app.f() is 'x'", ScriptAttrs(), "COMMENT on something other"),
        ("drop table app.t", LOCAL_T, "DropStmt"),
        ("drop index app.i", ScriptAttrs(), "Local-Table"),
        ("alter table app.t add c int", LOCAL_T, "a header"),
        ("alter table app.t add c int (", ScriptAttrs(), "cannot parse"),
    ],
)  # fmt: skip
def test_anything_else_is_refused(text: str, attrs: ScriptAttrs, why: str) -> None:
    with pytest.raises(DdlRefused) as refused:
        captured_table(text, attrs)
    assert why in str(refused.value)


def test_captured_events_are_told_by_their_name() -> None:
    assert is_captured("ddl 0123456789ab: alter table app.t add c int")
    assert not is_captured("ddl 0123: alter table app.t add c int")
    assert not is_captured("add_column.sql")
    assert not is_captured(None)
