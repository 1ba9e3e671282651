"""capture-ddl across majors: a root on 15 and a leaf on 18, and the other way round; the
captured statements, parsed by the subscriber's pglast and run by its server, end equal."""

from __future__ import annotations

import pytest
from psycopg import sql

from pgferry.testing.load import Inserts

COLUMNS = (
    "select attname::text, format_type(atttypid, atttypmod) from pg_attribute"
    " where attrelid = 'app.t'::regclass and attnum > 0 and not attisdropped order by attnum"
)
ROWS = "select t::text from app.t t order by id"


@pytest.mark.slow
@pytest.mark.parametrize(("src", "dst"), [(15, 18), (18, 15)], ids=["15-to-18", "18-to-15"])
def test_captured_ddl_across_majors(make_cascade, new_db, src: int, dst: int) -> None:
    c = make_cascade()
    c.node("root", new_db(src), "root")
    c.node("leaf", new_db(dst), "leaf", "root")
    for node in ("root", "leaf"):
        c.sql(node, "create schema app; create table app.t (id int primary key, v text)")
    c.sql("root", "insert into app.t select g, 'v' || g from generate_series(1, 500) g")
    c.add("root", "app.t")
    c.add("leaf", "app.t")
    c.catch_up("leaf")
    assert c.cli("root", "capture-ddl", "on").code == 0
    with Inserts(c.dsns["root"], sql.Identifier("app", "t"), 1000, every=0.01) as load:
        for statement in (
            "alter table app.t add column n numeric(10, 2) default 1.5",
            "alter table app.t add column j jsonb",
            "alter table app.t alter column n type numeric(12, 3)",
            "comment on column app.t.j is 'extra'",
            "create index t_n on app.t (n) where n > 1",
            "alter table app.t rename column v to label",
            "update app.t set j = jsonb_build_object('id', id) where id % 7 = 0",
        ):
            done = load.done
            c.sql("root", statement)
            c.wait_for(lambda d=done: load.done > d + 5)
    c.catch_up("leaf")
    assert c.sql("leaf", COLUMNS) == c.sql("root", COLUMNS)
    assert c.sql("leaf", ROWS) == c.sql("root", ROWS)
    assert c.sql("leaf", "select indexdef from pg_indexes where indexname = 't_n'") == c.sql(
        "root", "select indexdef from pg_indexes where indexname = 't_n'"
    )
