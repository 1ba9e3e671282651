"""Bad input for a lake leaf's add-table: one line, a non-zero exit, nothing registered."""

from __future__ import annotations

import sys

import pytest


def _pair(lake_pair, ddl: str = "create table public.t (id int primary key, v text)", **ini):
    pair = lake_pair(**ini)
    for side in (pair.root, pair.leaf):
        side(ddl)
    pair.cascade.add("rootnode", "public.t")
    return pair


def _refused(pair, *args: str, node: str = "leafnode") -> str:
    done = pair.cascade.cli(node, "add-table", "public.t", "--handler=lake", *args)
    assert done.code != 0, done.out
    lines = [line for line in done.err.splitlines() if line.strip()]
    assert len(lines) == 1, done.err
    dsn = pair.cascade.dsns[node]
    assert pair.sql(dsn, "select count(*) from ferry.table_info where local") == [(0,)]
    return lines[0]


def test_path_not_writable(lake_pair, tmp_path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    pair = _pair(lake_pair)
    assert "cannot be written" in _refused(pair, f"--handler-arg=path={blocked}/lake")


def test_no_lake_path(make_pair) -> None:
    pair = make_pair()
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key)")
    pair.cascade.add("rootnode", "public.t")
    assert "no lake_path" in _refused(pair)


def test_format_not_installed(lake_pair, monkeypatch) -> None:
    pair = _pair(lake_pair)
    monkeypatch.setitem(sys.modules, "deltalake", None)  # as if not installed
    assert "pip install 'pgferry[lake]'" in _refused(pair)


def test_type_without_lake_type(lake_pair) -> None:
    pair = _pair(lake_pair, "create table public.t (id int primary key, span interval)")
    line = _refused(pair)
    assert "column span" in line and "interval" in line


def test_foreign_delta_table(lake_pair, lake_dir) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    pair = _pair(lake_pair)
    write_deltalake(str(lake_dir / "public" / "t"), pa.table({"id": [1]}))
    assert "pgferry did not create" in _refused(pair)


def test_two_nodes_one_lake_table(lake_pair, lake_dir, new_db_b) -> None:
    pair = _pair(lake_pair)
    pair.cascade.add("leafnode", "public.t", handler="lake")
    other = new_db_b(None)
    pair.cascade.node("other", other, "leaf", "rootnode", lake_path=str(lake_dir))
    pair.sql(other, "create table public.t (id int primary key, v text)")
    line = _refused(pair, node="other")
    assert "two nodes cannot write one lake table" in line


@pytest.mark.parametrize(("first", "second"), [("delta", "iceberg"), ("iceberg", "delta")])
def test_two_formats_one_lake_path(lake_pair, lake_dir, new_db_b, first, second) -> None:
    """Two leaves given one lake_path, one writing Delta and one Iceberg: the second's
    add-table is refused in one line naming the directory and the first node."""
    pytest.importorskip("pyiceberg")
    pair = _pair(lake_pair, lake_format=first)
    pair.cascade.add("leafnode", "public.t", handler="lake")
    other = new_db_b(None)
    pair.cascade.node("other", other, "leaf", "rootnode", lake_path=str(lake_dir),
                      lake_format=second)  # fmt: skip
    pair.sql(other, "create table public.t (id int primary key, v text)")
    line = _refused(pair, node="other")
    assert f"{lake_dir / 'public' / 't'} already holds the {first} table of node leafnode's" in line
    assert "give this node another lake_path" in line
    assert sorted(p.name for p in (lake_dir / "public" / "t").iterdir()) == (
        ["_delta_log"] if first == "delta" else ["metadata"]
    )  # nothing of the second format written


@pytest.mark.parametrize("value", ["parquet"])
def test_unknown_format(lake_pair, value) -> None:
    pair = _pair(lake_pair)
    assert "format must be one of" in _refused(pair, f"--handler-arg=format={value}")


def test_remove_and_add_again(lake_pair, lake_dir) -> None:
    """remove-table leaves the lake table; the same node's add-table takes it again (its
    owner) and loads it anew."""
    from pgferry.lake import delta

    pair = _pair(lake_pair)
    pair.root("insert into t values (1, 'a'), (2, 'b')")
    pair.add_tables("public.t", handler="lake")
    pair.catch_up()
    done = pair.cascade.cli("leafnode", "remove-table", "public.t")
    assert done.code == 0, done.err
    assert (lake_dir / "public" / "t" / "_delta_log").is_dir()
    pair.root("delete from t where id = 1")
    pair.cascade.add("leafnode", "public.t", handler="lake")
    pair.catch_up()
    rows = delta.rows_at(str(lake_dir / "public" / "t")).to_pylist()
    assert rows == [{"id": 2, "v": "b"}]


def test_unknown_format_in_the_ini(lake_pair) -> None:
    """A format no module knows (as a format whose package is missing): one line."""
    pair = _pair(lake_pair, lake_format="parquet")
    assert "must be delta or iceberg, not parquet" in _refused(pair)


NEW_KEY = (
    "alter table t drop constraint t_pkey",
    "alter table t alter v set not null",
    "alter table t add primary key (id, v)",
)


def _new_key(*sides) -> None:
    for side in sides:
        for ddl in NEW_KEY:
            side(ddl)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_key_changed_add_table(lake_pair, fmt) -> None:
    """The lake table records its key; add-table again after the source's key changed
    is refused (a MERGE on the new key would leave rows of the old one)."""
    pair = _pair(lake_pair, lake_format=fmt)
    pair.cascade.add("leafnode", "public.t", handler="lake")
    pair.catch_up()
    done = pair.cascade.cli("leafnode", "remove-table", "public.t")
    assert done.code == 0, done.err
    _new_key(pair.root, pair.leaf)
    line = _refused(pair)
    assert "key is (id, v)" in line and "made for (id)" in line


def test_key_changed_resync_and_replay(lake_pair) -> None:
    from pgferry.apply.replay.read import ReplayError

    pair = _pair(lake_pair)
    pair.root("insert into t values (1, 'a')")
    pair.cascade.add("leafnode", "public.t", handler="lake")
    pair.catch_up()
    _new_key(pair.root)
    done = pair.cascade.cli("leafnode", "resync", "public.t")
    assert done.code != 0, done.out
    lines = [line for line in done.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "made for (id)" in lines[0], done.err
    dsn = pair.cascade.dsns["leafnode"]
    state = "select merge_state from ferry.table_info where local"
    assert pair.sql(dsn, state) == [("ok",)]  # nothing changed
    # Replay merges on the key the events carry: a lake table made for another refuses.
    from pgferry.lake import delta

    handler_args = pair.sql(dsn, "select table_attrs->'handler_args' from ferry.table_info"
                                 " where local")[0][0]  # fmt: skip
    schema, _, name = handler_args["lake_table"].partition(".")
    spec = delta.LakeSpec("delta", handler_args["location"], schema, name, handler_args["owner"])
    delta.record_key(spec, ["id", "v"])
    pair.root("insert into t values (2, 'b')")
    pair.tick()
    with pytest.raises(ReplayError, match=r"key is \(id\) but .* made for \(id, v\)"):
        for _ in range(20):
            pair.worker().work()


def test_key_recorded_on_an_older_table(lake_pair, lake_dir) -> None:
    """A lake table made without a recorded key gets it at its owner's next add-table."""
    import json

    from deltalake import DeltaTable

    pair = _pair(lake_pair)
    pair.cascade.add("leafnode", "public.t", handler="lake")
    pair.catch_up()
    path = str(lake_dir / "public" / "t")
    marker = json.loads(DeltaTable(path).metadata().description)
    assert marker.pop("key") == ["id"]
    DeltaTable(path).alter.set_table_description(json.dumps(marker))  # as made before
    assert pair.cascade.cli("leafnode", "remove-table", "public.t").code == 0
    pair.cascade.add("leafnode", "public.t", handler="lake")
    assert json.loads(DeltaTable(path).metadata().description)["key"] == ["id"]


def test_unknown_iceberg_deletes(lake_pair) -> None:
    pair = _pair(lake_pair, lake_format="iceberg", lake_iceberg_deletes="sometimes")
    line = _refused(pair)
    assert "setting 'lake_iceberg_deletes' must be merge-on-read or copy-on-write" in line
