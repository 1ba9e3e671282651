"""A lake leaf follows the root's captured DDL additively: a column added on the root is
added to the Delta / Iceberg table, a dropped one stays there, NULL in later rows."""

from __future__ import annotations

import pytest

from pgferry.cli.main import main


def _lake_rows(fmt: str, lake_dir) -> list[tuple]:
    if fmt == "delta":
        from pgferry.lake import delta

        rows = delta.rows_at(str(lake_dir / "public" / "t")).to_pylist()
    else:
        pytest.importorskip("pyiceberg")
        from pgferry.lake import iceberg

        rows = iceberg.catalog(str(lake_dir)).load_table(("public", "t")).scan().to_arrow()
        rows = rows.to_pylist()
    return sorted((tuple(r.values()) for r in rows), key=repr)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_lake_follows_added_and_dropped_columns(lake_pair, lake_dir, fmt: str) -> None:
    pair = lake_pair(lake_format=fmt)
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v text, old int)")
    pair.root("insert into t select g, 'v' || g, g from generate_series(1, 5) g")
    pair.add_tables("public.t", handler="lake")
    pair.catch_up()
    assert main([str(pair.root_cfg.path), "capture-ddl", "on"]) == 0
    pair.root("alter table t add column n int")
    pair.root("insert into t values (10, 'x', 1, 7)")
    pair.root("update t set n = id where id < 3")
    pair.root("alter table t drop column old")
    pair.root("insert into t values (11, 'y', 8)")
    pair.catch_up()
    assert _lake_rows(fmt, lake_dir) == [
        (1, "v1", 1, 1), (10, "x", 1, 7), (11, "y", None, 8), (2, "v2", 2, 2),
        (3, "v3", 3, None), (4, "v4", 4, None), (5, "v5", 5, None),
    ]  # fmt: skip
