"""Per-node planning of queued SQL scripts: rename, skip, refuse — checked against PostgreSQL."""

import psycopg
import pytest
from psycopg import sql

from pgferry.scripts.attrs import (
    NodeObjects,
    ScriptAttrError,
    ScriptAttrs,
    applies_here,
    parse_attrs,
    replace_tags,
)
from pgferry.scripts.translate import (
    ScriptTranslateError,
    check_script,
    plan_script,
    qualified,
    quote_ident,
    shape_changes,
    table_renames,
)

QUEUE = {"digoal_01.user_info", "digoal_01.user_session"}


def test_quote_ident_matches_postgresql(db_a: str) -> None:
    names = ["plain", "Mixed", "with space", "select", "name", "ué", "a$b", "_x1", "1abc", 'q"t']
    with psycopg.connect(db_a) as conn:
        for name in names:
            expected = conn.execute("select quote_ident(%s)", (name,)).fetchone()[0]
            assert quote_ident(name) == expected, name


@pytest.mark.pure
def test_renamed_table_is_rewritten_and_missing_one_skipped() -> None:
    plan = plan_script(
        "BEGIN; alter table digoal_01.user_info add column c1 int;"
        " alter table digoal_01.user_session add column c1 int; END;",
        queue_tables=QUEUE,
        local_names={"digoal_01.user_info": "digoal_02.user_info1"},
    )
    assert [p.run for p in plan] == [True, False]
    assert plan[0].sql == "ALTER TABLE digoal_02.user_info1 ADD COLUMN c1 integer"


@pytest.mark.pure
def test_statement_without_queue_tables_runs_everywhere() -> None:
    plan = plan_script("create table t_new (a int)", queue_tables=QUEUE, local_names={})
    assert plan[0].run and "t_new" in plan[0].sql


@pytest.mark.pure
def test_mixed_statement_is_refused() -> None:
    with pytest.raises(ScriptTranslateError, match="replicated here and tables that are not"):
        plan_script(
            "update digoal_01.user_info set engname = s.x from digoal_01.user_session s",
            queue_tables=QUEUE,
            local_names={"digoal_01.user_info": "digoal_01.user_info"},
        )


@pytest.mark.pure
def test_do_block_refused_on_root() -> None:
    with pytest.raises(ScriptTranslateError, match="DoStmt"):
        check_script("DO $$ begin perform 1; end $$", queue_tables=QUEUE)


@pytest.mark.pure
def test_unparsable_sql_refused() -> None:
    with pytest.raises(ScriptTranslateError, match="cannot parse"):
        check_script("alter tabel x add column y int", queue_tables=QUEUE)


@pytest.mark.pure
def test_plan_carries_the_renames_the_registry_follows() -> None:
    script = (
        "alter table digoal_01.user_info rename to user_info2;"
        " alter table digoal_01.user_session set schema archive;"
        " alter table digoal_01.other rename to other2;"
        " alter table digoal_01.user_info2 add column c1 int;"
    )
    plan = plan_script(
        script,
        queue_tables=QUEUE,
        local_names={"digoal_01.user_info": "digoal_02.user_info1"},
    )
    # Renamed or moved wherever it runs: the local table keeps its own name, the other
    # one is not here; the registry follows both, not the table it does not replicate.
    assert [p.run for p in plan] == [False, False, True, True]
    assert [p.moves for p in plan] == [
        ("digoal_01.user_info", "digoal_01.user_info2"),
        ("digoal_01.user_session", "archive.user_session"),
        None,
        None,
    ]
    assert [p.moves for p in plan if p.moves] == table_renames(script, QUEUE)


@pytest.mark.pure
def test_shape_changes_reads_columns_and_renames_of_any_table() -> None:
    changes = shape_changes(
        'alter table app.t drop column a, add column b int; alter table app.t rename "C" to d;'
        " alter table app.t rename to t2; alter table app.t2 set schema old;"
        " alter table other drop column x"
    )
    assert changes.going == {"app.t": {"a", "C"}, "public.other": {"x"}}
    assert changes.renames == [("app.t", "app.t2"), ("app.t2", "old.t2")]
    assert shape_changes("alter tabel x drop column y") == shape_changes("")


def test_translated_script_runs_on_a_real_renamed_table(db_a: str) -> None:
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute('create schema "Ziel Ü"')
        conn.execute('create table "Ziel Ü"."Info 1" (userid int primary key)')
        plan = plan_script(
            "alter table digoal_01.user_info add column c1 int default 7;"
            " create index on digoal_01.user_info (c1);",
            queue_tables=QUEUE,
            local_names={"digoal_01.user_info": qualified("Ziel Ü", "Info 1")},
        )
        for step in plan:
            assert step.run
            conn.execute(sql.SQL(step.sql))  # type: ignore[arg-type]
        conn.execute('insert into "Ziel Ü"."Info 1" (userid) values (1)')
        assert conn.execute('select c1 from "Ziel Ü"."Info 1"').fetchone()[0] == 7


@pytest.mark.pure
def test_attribute_header_parsing_and_decision() -> None:
    attrs = parse_attrs(
        "--*-- Local-Table: digoal_01.user_info,\n--*--   digoal_01.user_session\n"
        "-- ordinary comment\n--*-- Need-Schema: digoal_01\nalter table x add c int;\n"
        "--*-- Local-Table: ignored.after_sql\n"
    )
    assert attrs.values == {
        "local-table": ["digoal_01.user_info", "digoal_01.user_session"],
        "need-schema": ["digoal_01"],
    }
    assert ScriptAttrs.from_text(attrs.to_text()).values == attrs.values

    def objects(local: set[str]) -> NodeObjects:
        yes = lambda name: True  # noqa: E731
        return NodeObjects(
            local_table=lambda n: n in local,
            local_sequence=yes,
            local_destination=yes,
            need_table=yes,
            need_sequence=yes,
            need_function=yes,
            need_view=yes,
            need_schema=yes,
        )

    assert applies_here(attrs, objects({"digoal_01.user_info", "digoal_01.user_session"}))
    only_tables = parse_attrs("--*-- Local-Table: digoal_01.user_info, digoal_01.user_session\n")
    assert not applies_here(only_tables, objects(set()))
    with pytest.raises(ScriptAttrError, match="partially"):
        applies_here(only_tables, objects({"digoal_01.user_info"}))
    with pytest.raises(ScriptAttrError, match="unknown attribute"):
        parse_attrs("--*-- Wrong-Key: x\nselect 1;")
    assert (
        replace_tags(
            "alter table @digoal_01.user_info@ add c int",
            {"digoal_01.user_info": "digoal_02.user_info1"},
        )
        == "alter table digoal_02.user_info1 add c int"
    )
