"""Bad trigger options at add-table: one line, a non-zero exit, nothing registered and no
trigger changed; and what `tables` shows of the options given."""

from __future__ import annotations

from tests.apply import test_registry_tables as registry_tests
from tests.apply.test_registry_tables import Nodes, sql, states

# The fixtures of the registry tests: a root and a leaf with their tables, a CLI runner.
cascade = registry_tests.cascade
run = registry_tests.run

BAD = [
    (["--trigger-arg=nosuch=1"], "add-table: unknown trigger argument: nosuch=1"),
    (["--trigger-arg=backups"], "add-table: unknown trigger argument: backups"),
    (
        ["--trigger-arg=pkey=userid,nosuch"],
        "pkey=: no column nosuch in table digoal_01.user_session",
    ),
    (["--trigger-arg=when=userid + 1"], "bad when=: argument of WHERE must be type boolean"),
    (["--trigger-arg=when=true; drop table x"], "add-table: when=: must be one boolean expression"),
    (["--trigger-arg=when=nosuch > 1"], 'bad when=: column "nosuch" does not exist'),
    (["--trigger-arg=ignore=userid"], "ignore=: userid is a key column of digoal_01.user_session"),
    (["--trigger-arg=ignore=birthday", "--trigger-arg=ignore=engname"], "given twice"),
    (["--trigger-flags=IX"], "add-table: unknown trigger flag 'X'"),
    (["--trigger-flags=J"], "add-table: trigger flag J chooses a Londiste event format"),
    (["--trigger-flags=SA"], "add-table: trigger flag S needs a BEFORE trigger, not A"),
    (["--trigger-arg=ev_extra1=1"], "trigger argument ev_extra1 is not supported"),
    (["--trigger-arg=backup", "--trigger-arg=ev_extra2=1"], "backup puts the old row"),
    (["--trigger-arg=ev_extra3=1, 2"], "add-table: ev_extra3=: must be one expression"),
]


def test_bad_trigger_options_change_nothing(cascade: Nodes, run) -> None:
    assert run(cascade.root_ini, "add-table", "digoal_01.user_session").code == 0
    before_attrs = states(cascade.root_db)
    before_fn = _trigger_functions(cascade.root_db)
    for options, message in BAD:
        # A re-added table and a new one: neither is registered nor has its trigger changed.
        res = run(
            cascade.root_ini,
            "add-table",
            "--force",
            "digoal_01.user_session",
            "digoal_01.user_info",
            *options,
        )
        lines = res.err.strip().splitlines()
        assert res.code != 0 and len(lines) == 1, res.err
        assert lines[0].startswith("pgferry: ") and message in lines[0], lines[0]
        assert states(cascade.root_db) == before_attrs
        assert _trigger_functions(cascade.root_db) == before_fn


def test_subscribers_take_the_providers_capture(cascade: Nodes, run) -> None:
    res = run(
        cascade.root_ini,
        "add-table",
        "digoal_01.user_info",
        "--trigger-flags=IU",
        "--trigger-arg=ignore=birthday",
        "--trigger-arg=when=userid > 0",
    )
    assert res.code == 0, res.err
    out = run(cascade.root_ini, "tables").out
    assert "'tgflags': 'IU'" in out and "'trigger_args': ['ignore=birthday'" in out
    res = run(cascade.leaf_ini, "add-table", "--create", "digoal_01.user_info", "--trigger-arg=x")
    assert res.code == 2 and "--trigger-flags and --trigger-arg are for the root" in res.err
    assert run(cascade.leaf_ini, "add-table", "--create", "digoal_01.user_info").code == 0
    capture = {"key": ["userid"], "ignore": ["birthday"], "when": "userid > 0", "ops": "IU"}
    assert states(cascade.leaf_db)["digoal_01.user_info"][5] == {"capture": capture}


def _trigger_functions(connstr: str) -> list[tuple]:
    return sql(
        connstr,
        "select tgrelid::regclass::text, tgfoid::regproc::text, tgtype from pg_trigger"
        " where not tgisinternal order by 1, 2",
    )
