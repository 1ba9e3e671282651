"""Capture options travel down the cascade (each subscriber copies its provider's) and move
with the root: after a switchover the new root captures with the same options."""

from __future__ import annotations

import psycopg

from pgferry.config import load_config
from pgferry.node import tableops

LOG = "public.log"


def _add_log(tree, node: str, *, args: tuple[str, ...] = ()) -> None:
    tree.sql(node, "create table log (msg text, n int, note text)")
    options = tableops.AddTableOptions(expect_sync=node != "root", trigger_args=args)
    with psycopg.connect(tree.dsns[node]) as conn:
        tableops.add_tables(load_config(tree.configs[node]), conn, [LOG], options)


def _log(tree, node: str) -> list[tuple]:
    return tree.sql(node, "select msg, n, note, count(*) from log group by 1, 2, 3 order by 1, 2")


def test_options_travel_and_move_with_the_root(tree) -> None:
    _add_log(tree, "root", args=("ignore=note",))
    for node in ("branch", "leaf", "leaf2"):
        _add_log(tree, node)
    capture = {"key": [], "key_from": "none", "ignore": ["note"]}
    for node in ("root", "branch", "leaf", "leaf2"):
        got = tree.sql(node, "select table_attrs->'capture' from ferry.table_info"
                             " where table_name = %s", (LOG,))  # fmt: skip
        assert got == [(capture,)], node
    tree.start("root", "branch", "leaf", "leaf2")
    tree.sql("root", "insert into log select 'm', g % 2, 'root note' from generate_series(1, 6) g")
    tree.sql("root", "delete from log where ctid = (select min(ctid) from log where n = 0)")
    tree.sql("root", "update log set note = 'ignored'")  # only the ignored column: no event
    tree.catch_up()
    for node in ("branch", "leaf", "leaf2"):
        assert _log(tree, node) == [("m", 0, None, 2), ("m", 1, None, 3)], node
    res = tree.cli("branch", "takeover", "root", "--timeout=60")
    assert res.code == 0, res.err
    # The new root captures the table as the old one did: no key, the note left out.
    tree.sql("branch", "insert into log values ('new root', 7, 'dropped')")
    tree.sql("branch", "update log set n = 9 where ctid = (select min(ctid) from log where n = 1)")
    tree.catch_up("root", "leaf", "leaf2")
    expected = [("m", 0, None, 2), ("m", 1, None, 2), ("m", 9, None, 1), ("new root", 7, None, 1)]
    assert _log(tree, "leaf") == expected
    assert _log(tree, "leaf2") == expected
    assert _log(tree, "root") == [
        ("m", 0, "ignored", 2),
        ("m", 1, "ignored", 2),
        ("m", 9, None, 1),  # an UPDATE applied as its old row out, the new one in
        ("new root", 7, None, 1),
    ]
