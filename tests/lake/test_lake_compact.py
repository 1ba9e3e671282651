"""Small files: lake_compact_interval compacts every N commits during replay, keeping the
replay version; lake-compact compacts on demand and vacuums the history."""

from __future__ import annotations

from conftest import sorted_rows
from deltalake import DeltaTable


def test_compaction_during_replay_and_on_demand(lake_pair, lake_dir, delta_rows) -> None:
    pair = lake_pair(lake_compact_interval="3")
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.add_tables("public.t", handler="lake")
    worker = pair.catch_up()
    for n in range(6):  # a batch, and a commit, each
        pair.root(f"insert into t values ({n}, {n})")
        pair.catch_up(worker)
    path = str(lake_dir / "public" / "t")
    table = DeltaTable(path)
    assert "OPTIMIZE" in [h["operation"] for h in table.history()]
    assert table.transaction_version(f"pgferry:{pair.queue}:leafnode:public.t") is not None
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))

    pair.root("update t set v = -v")
    pair.catch_up(worker)
    done = pair.cascade.cli("leafnode", "lake-compact", "--keep-hours", "0")
    assert done.code == 0, done.err
    assert "public.t: compacted" in done.out
    table = DeltaTable(path)
    assert len(table.file_uris()) == 1
    on_disk = [p for p in (lake_dir / "public" / "t").iterdir() if p.suffix == ".parquet"]
    assert len(on_disk) == 1  # the vacuum removed the files no version needs
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))
    pair.root("delete from t where id = 1")
    pair.catch_up(worker)  # replay goes on after compaction
    assert delta_rows("t") == sorted_rows(pair.root("select * from t"))
