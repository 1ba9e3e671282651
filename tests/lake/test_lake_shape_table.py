"""add-table --handler=lake without --create: the leaf's empty table of the source's
definition is made by add-table itself (a mixed-case name with a space, in a schema the
leaf lacks), and captured DDL keeps it, and the lake table, in step."""

from __future__ import annotations

import pytest
from conftest import sorted_rows

from pgferry.cli.main import main


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_shape_table_made_without_create(lake_pair, lake_dir, fmt: str) -> None:
    if fmt == "iceberg":
        pytest.importorskip("pyiceberg")
    pair = lake_pair(lake_format=fmt)
    pair.root('create schema "Sales Ü"')
    pair.root('create table "Sales Ü"."Order Lines" (id int primary key, "Qty" int, note text)')
    pair.root("insert into \"Sales Ü\".\"Order Lines\" select g, g, 'n' || g"
              " from generate_series(1, 20) g")  # fmt: skip
    pair.cascade.add("rootnode", '"Sales Ü"."Order Lines"')
    done = pair.cascade.cli("leafnode", "add-table", '"Sales Ü"."Order Lines"', "--handler=lake")
    assert done.code == 0, done.err
    shape = 'select count(*) from "Sales Ü"."Order Lines"'
    assert pair.leaf(shape) == [(0,)]
    columns = (
        'select attname::text from pg_attribute where attrelid = \'"Sales Ü"."Order Lines"\''
        "::regclass and attnum > 0 and not attisdropped order by attnum"
    )
    assert pair.leaf(columns) == [("id",), ("Qty",), ("note",)]
    pair.catch_up()

    def lake_rows() -> list[tuple]:
        if fmt == "delta":
            from pgferry.lake import delta

            rows = delta.rows_at(str(lake_dir / "Sales Ü" / "Order Lines")).to_pylist()
        else:
            from pgferry.lake import iceberg

            table = iceberg.catalog(str(lake_dir)).load_table(("Sales Ü", "Order Lines"))
            rows = table.scan().to_arrow().to_pylist()
        return sorted_rows(tuple(r.values()) for r in rows)

    source = 'select id, "Qty", note{} from "Sales Ü"."Order Lines"'
    assert lake_rows() == sorted_rows(pair.root(source.format("")))

    # Captured DDL: the shape table follows, and the lake table with it.
    assert main([str(pair.root_cfg.path), "capture-ddl", "on"]) == 0
    pair.root('alter table "Sales Ü"."Order Lines" add column "Added At" date')
    pair.root("insert into \"Sales Ü\".\"Order Lines\" values (100, 1, 'x', '2024-01-02')")
    pair.catch_up()
    assert pair.leaf(columns)[-1] == ("Added At",)
    assert lake_rows() == sorted_rows(pair.root(source.format(', "Added At"')))
