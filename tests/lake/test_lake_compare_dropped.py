"""compare of a lake leaf whose provider dropped one of its tables without remove-table:
that table is one line, the other is compared."""

from __future__ import annotations


def test_compare_names_a_table_dropped_on_the_provider(lake_pair) -> None:
    pair = lake_pair()
    pair.root("create table public.t (id int primary key, v text)")
    pair.root("create table public.gone (id int primary key, v text)")
    pair.root("insert into t select g, 'v' || g from generate_series(1, 30) g")
    pair.root("insert into gone select g, 'g' || g from generate_series(1, 5) g")
    pair.add_tables("public.t", "public.gone", handler="lake", create=True)
    pair.catch_up()
    pair.root("drop table public.gone")  # no capture-ddl: nothing refuses it
    pair.root("update t set v = 'changed' where id < 10")
    pair.catch_up()
    c = pair.cascade
    with c.running("leafnode"):
        done = c.cli("leafnode", "compare")
    out = done.out.splitlines()
    assert done.code == 1, done.out + done.err
    assert (
        "public.gone: table public.gone does not exist on node rootnode:"
        " remove-table it or add it back" in out
    ), done.out + done.err
    assert "public.t: srcdb: 30 rows" in done.out and "Results do not match" not in done.out
