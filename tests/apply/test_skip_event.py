"""A queued script that fails on one node: position kept, error shown, skip-event unjams it."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgferry.cli.main import main
from pgferry.scripts.execute import Script, execute_on_root
from pgferry.scripts.skip import EventFailed


def test_failing_script_is_recorded_then_skipped(pair, tmp_path: Path, capsys) -> None:
    for side in (pair.root, pair.leaf):
        side("create table public.t (id int primary key, v int)")
    pair.leaf("alter table public.t add column c1 int")  # the DBA added it here first
    pair.add_tables("public.t")
    worker = pair.catch_up()
    start_tick = pair.last_tick()
    pair.root("insert into t values (1, 1)")
    with psycopg.connect(pair.root_dsn) as conn:
        execute_on_root(
            conn, pair.queue, [Script.from_text("add_c1.sql", "alter table t add column c1 int")]
        )
    pair.root("insert into t values (2, 2, 22)")
    pair.tick()
    with pytest.raises(EventFailed) as failure:
        worker.work()
    worker.on_error(failure.value)  # what the daemon loop does
    assert pair.last_tick() == start_tick, "the position must be kept"
    assert pair.leaf("select count(*) from t") == [(0,)], "nothing of the batch applied"
    err = pair.leaf("select cur_error from ferry_node.local_state")[0][0]
    assert "add_c1.sql" in err and "already exists" in err

    cfg = str(pair.leaf_cfg.path)
    assert main([cfg, "skip-event"]) != 0  # not a terminal: refuses without --yes
    assert "use --yes" in capsys.readouterr().err
    assert main([cfg, "skip-event", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "EXECUTE add_c1.sql" in out and "Skipped event" in out
    assert pair.leaf("select cur_error from ferry_node.local_state") == [(None,)]

    pair.catch_up(worker)
    assert pair.leaf("select id, v, c1 from t order by id") == [(1, 1, None), (2, 2, 22)]
    assert pair.leaf("select ev_type, ev_extra1 from ferry.skipped_event") == [
        ("EXECUTE", "add_c1.sql")
    ]
    assert main([cfg, "skip-event", "--yes"]) == 0
    assert "nothing to skip" in capsys.readouterr().out
