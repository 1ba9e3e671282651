"""Switches Londiste scripts pass: add-table / add-seq --skip-non-existing, compare
--count-only, repair --repair-where, change-handler --trigger-flags / --trigger-arg, and the
one line refusing the trigger arguments merge_all / no_merge."""

from __future__ import annotations

from pgferry.cli.main import main


def run(capsys, *args: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    got = capsys.readouterr()
    return code, got.out, got.err


def replicating(pair):
    """The leaf's worker and a ticker on the root, in threads (compare needs both)."""
    return pair.running()


def test_skip_non_existing(pair, capsys) -> None:
    root, leaf = pair.root_cfg.path, pair.leaf_cfg.path
    pair.root(
        "create table public.a (id int primary key); create table public.b (id int primary key)"
    )
    pair.root("create sequence public.s1")
    code, _, err = run(capsys, root, "add-table", "public.a", "public.nosuch")
    assert code == 1 and "Table not found: public.nosuch" in err
    code, _, err = run(capsys, root, "add-table", "public.a", "public.b", "public.nosuch",
                       "--skip-non-existing")  # fmt: skip
    assert code == 0, err
    assert "Table not found on this node: public.nosuch, skipped" in err
    code, _, err = run(capsys, root, "add-seq", "public.s1", "public.nos", "--skip-non-existing")
    assert code == 0 and "Sequence not found on this node: public.nos, skipped" in err

    pair.leaf("create table public.a (id int primary key)")  # b is not there
    code, _, err = run(capsys, leaf, "add-table", "public.a", "public.b", "public.nosuch",
                       "--skip-non-existing", "--expect-sync")  # fmt: skip
    assert code == 0, err
    assert "Table not found on the provider: public.nosuch, skipped" in err
    assert "Table not found on local node: public.b, skipped" in err
    assert pair.leaf("select table_name from ferry.table_info where local") == [("public.a",)]
    code, _, err = run(capsys, leaf, "add-seq", "public.s1", "--skip-non-existing")
    assert code == 0 and "Sequence not found on local node: public.s1, skipped" in err
    assert pair.leaf("select count(*) from ferry.seq_info where local") == [(0,)]


def test_compare_count_only_and_repair_where(pair, capsys, tmp_path) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.root("insert into t select g, 0 from generate_series(1, 300) g")
    pair.add_tables("public.t")
    pair.catch_up(pair.worker())
    ini = pair.leaf_cfg.path
    # Changed behind replication's back: the same number of rows, other values.
    pair.leaf("set session_replication_role = replica; update t set v = -1 where id in (5, 250)")
    with replicating(pair):
        code, out, err = run(capsys, ini, "compare", "--count-only")
        assert code == 0, err
        assert "public.t: srcdb: 300 rows\n" in out and "checksum" not in out
        assert run(capsys, ini, "compare")[0] == 1

        code, _, err = run(capsys, ini, "repair", "--repair-where", "nosuch > 1")
        assert code == 1 and "bad --repair-where" in err and len(err.strip().splitlines()) == 1
        code, _, err = run(capsys, ini, "repair", "--repair-where", "true; drop table t")
        assert code == 2 and "--repair-where" in err
        code, out, err = run(capsys, ini, "repair", "--repair-where", "id < 100", "--apply",
                             "--dir", tmp_path)  # fmt: skip
        assert code == 0, err
        assert "0 inserts, 1 updates, 0 deletes applied" in out
        assert pair.leaf("select id from t where v = -1") == [(250,)]

        pair.leaf("set session_replication_role = replica; delete from t where id = 7")
        code, out, _ = run(capsys, ini, "compare", "--count-only")
        assert code == 1 and "public.t: dstdb: 299 rows" in out


def test_change_handler_trigger_options(pair, capsys) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int, note text)")
    pair.add_tables("public.t")
    root, leaf = pair.root_cfg.path, pair.leaf_cfg.path

    def attrs() -> dict:
        return pair.root("select table_attrs from ferry.table_info where table_name = 'public.t'")[
            0
        ][0]

    code, _, err = run(capsys, root, "change-handler", "public.t", "--handler=bulk",
                       "--trigger-flags=ID", "--trigger-arg=ignore=note")  # fmt: skip
    assert code == 0, err
    assert attrs()["tgflags"] == "ID" and attrs()["trigger_args"] == ["ignore=note"]
    assert "capture triggers made again" in err
    # An UPDATE is no longer captured; an INSERT is.
    pair.root("insert into t values (1, 1, 'x'); update t set v = 2 where id = 1")
    events = pair.root(  # a fresh database: this queue's events only
        "select left(ev_type, 1) from ferry_queue.event where ev_extra1 = 'public.t'"
    )
    assert [e[0] for e in events] == ["I"]
    code, _, err = run(capsys, root, "change-handler", "public.t", "--handler=bulk",
                       "--trigger-flags=ID")  # fmt: skip
    assert code == 0 and "unchanged" in err

    code, _, err = run(capsys, leaf, "change-handler", "public.t", "--handler=bulk",
                       "--trigger-flags=I")  # fmt: skip
    assert code == 2 and "are for the root (a subscriber takes its provider's capture)" in err


def test_merge_trigger_arguments_name_the_options(pair, capsys) -> None:
    pair.root("create table public.m (id int primary key)")
    code, _, err = run(capsys, pair.root_cfg.path, "add-table", "public.m",
                       "--trigger-arg=merge_all")  # fmt: skip
    assert code == 2
    assert "use the add-table option --merge-all on the merge leaf" in err
    assert "no merge leaves" not in err
