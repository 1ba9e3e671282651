"""An Iceberg lake leaf (SQLite catalog under lake_path): load, replay with a TRUNCATE and
a keyless table, exactly once across a kill after the lake commit, compare."""

from __future__ import annotations

import pytest
from conftest import sorted_rows

pytest.importorskip("pyiceberg")

from pgferry.lake import iceberg  # noqa: E402


class Killed(Exception):
    pass


def _rows(lake_dir, table: str, columns: str | None = None) -> list[tuple]:
    cat = iceberg.catalog(str(lake_dir))
    rows = cat.load_table(("public", table)).scan().to_arrow().to_pylist()
    return sorted_rows(tuple(r.values()) for r in rows)


def test_iceberg_leaf(lake_pair, lake_dir, monkeypatch) -> None:
    pair = lake_pair(lake_format="iceberg")
    ddl = "create table public.t (id int primary key, v text, n numeric(9,3), a text[])"
    for side in (pair.root, pair.leaf):
        side(ddl)
        side("create table public.k (a int, b text)")
    pair.root("alter table k replica identity full")
    pair.root("insert into t select g, 'v' || g, g / 8.0, array['x', g::text]"
              " from generate_series(1, 30) g")  # fmt: skip
    pair.root("insert into k values (1, 'x'), (1, 'x')")
    pair.add_tables("public.t", "public.k", handler="lake")
    worker = pair.catch_up()
    assert _rows(lake_dir, "t") == sorted_rows(pair.root("select * from t"))
    assert _rows(lake_dir, "k") == [(1, "x"), (1, "x")]

    pair.root("update t set v = null where id < 5")
    pair.root("delete from t where id > 25")
    pair.root("delete from k where ctid = (select min(ctid) from k)")
    tick = pair.tick()
    real = iceberg.merge

    def after(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed("after the lake commit")

    monkeypatch.setattr(iceberg, "merge", after)
    with pytest.raises(Killed):
        worker.work()
    monkeypatch.setattr(iceberg, "merge", real)
    pair.catch_up(pair.worker())
    assert pair.last_tick() >= tick
    assert _rows(lake_dir, "t") == sorted_rows(pair.root("select * from t"))
    assert _rows(lake_dir, "k") == [(1, "x")]

    pair.root("truncate t")
    pair.root("insert into t (id) values (7)")
    pair.catch_up()
    assert _rows(lake_dir, "t") == [(7, None, None, None)]
    with pair.cascade.running("leafnode"):
        done = pair.cascade.cli("leafnode", "compare")
        assert done.code == 0, done.out + done.err
