"""Stage tables are emptied in place by the commit (ON COMMIT DELETE ROWS), not by a
TRUNCATE per table and batch; a stage loaded twice in one transaction (a segment after a
queued script) is emptied in between."""

from __future__ import annotations

SCHEMA = """
create table st_a (id int primary key, v int);
create table st_b (id int primary key, v int);
"""


def _stages(worker) -> dict[str, tuple[int, int]]:
    """Stage name -> (relfilenode, rows) on the worker's own session."""
    local = worker.conns.to_local()
    with local.transaction():
        names = [
            r[0]
            for r in local.execute(
                "select relname from pg_class where relnamespace = pg_my_temp_schema()"
                " and relkind = 'r' and relname like 'ferry_stage_%' order by relname"
            ).fetchall()
        ]
        out = {}
        for name in names:
            node = local.execute("select pg_relation_filenode(%s)", (f"pg_temp.{name}",))
            rows = local.execute(f'select count(*) from pg_temp."{name}"')
            out[name] = (node.fetchone()[0], rows.fetchone()[0])  # type: ignore[index]
    return out


def test_stages_are_emptied_at_commit_in_place(pair) -> None:
    pair.root(SCHEMA)
    pair.leaf(SCHEMA)
    pair.add_tables("st_a", "st_b")
    worker = pair.catch_up()
    pair.root("insert into st_a select g, g from generate_series(1, 20) g")
    pair.root("insert into st_b select g, g from generate_series(1, 5) g")
    pair.catch_up(worker)
    first = _stages(worker)
    assert len(first) >= 2 and all(rows == 0 for _, rows in first.values()), first
    pair.root("update st_a set v = -v where id <= 10")
    pair.root("delete from st_b where id = 1")
    pair.catch_up(worker)
    # The same files, empty again: no TRUNCATE (which gives a table a new file) ran.
    assert _stages(worker) == first
    pair.same("st_a")
    pair.same("st_b")


def test_a_stage_loaded_twice_in_one_batch_is_emptied_in_between(make_pair) -> None:
    # Ranges of 100 events: one table's inserts are read and applied in several parts,
    # each loaded into the same stage within the batch's transaction.
    pair = make_pair(replay_read_ahead_events="10", replay_read_range_events="100")
    pair.root(SCHEMA)
    pair.leaf(SCHEMA)
    pair.add_tables("st_a")
    worker = pair.catch_up()
    before = worker.events_applied
    pair.root("insert into st_a select g, g from generate_series(1, 1000) g")
    pair.catch_up(worker)
    pair.same("st_a")
    # Each row applied once: a part's stage held no rows of the part before it.
    assert worker.events_applied - before == 1000
