"""Replication across PostgreSQL majors: 15 -> 18, 18 -> 15, and 15 -> 16 -> 18 in cascade.

Types whose text forms or catalogs differ between servers travel in text (binary COPY only
between servers of one major); every node ends equal to the root, row for row, and
``compare`` agrees on every subscriber, the leaf under the branch included.
"""

from __future__ import annotations

import pytest

from pgferry import settings
from pgferry.cli.main import main
from pgferry.config import Config
from pgferry.testing.cascade import Cascade, sql_rows

DDL = """
create type mood as enum ('sad', 'ok', 'happy');
create table public."Typed é" (
    id int primary key, n numeric, f float8, ts timestamptz, tsn timestamp, d date,
    iv interval, j jsonb, js json, u uuid, a int[], ta text[], b bytea, ip inet, m mood,
    r int4range, mr int4multirange, t text, bits bit varying, money_ money, x xid8
);
"""
ROWS = """
insert into public."Typed é"
select g, (g * 1.5)::numeric,
       case g %% 5 when 0 then 'NaN' when 1 then '-Infinity' else g / 7.0 end,
       timestamptz '2026-01-01 00:00+00' + g * interval '37 minutes',
       case when g %% 11 = 0 then 'infinity' else timestamp '1999-12-31 23:59:59.123456' end,
       date '2000-02-29' + g, make_interval(months => g, secs => g * 1.25),
       jsonb_build_object('k', g, 'nested', jsonb_build_array(g, 'é', null)),
       json_build_object('k', g), md5(g::text)::uuid, array[g, -g, null], array['a b', 'ü', ''],
       decode(md5(g::text), 'hex'), ('10.0.' || (g %% 256) || '.1/32')::inet,
       (array['sad', 'ok', 'happy'])[g %% 3 + 1]::mood, int4range(g, g + 10),
       int4multirange(int4range(1, g + 2), int4range(g + 5, g + 9)),
       case when g %% 4 = 0 then null else repeat('x', g %% 50) || ' ö' end,
       (g %% 64)::bit(6)::varbit, g * 1.01, (g + 1000)::text::xid8
  from generate_series(%s::int, %s::int) g
"""
TABLE = 'public."Typed é"'


sql = sql_rows
SPARK = {"spark.sql.shuffle.partitions": "2"}


def rows(dsn: str) -> list[tuple]:
    # Text forms of the row, in one session setting for every server.
    return sql(dsn, f"set datestyle = iso; set intervalstyle = postgres;"
                    f" select t::text from {TABLE} t order by id")  # fmt: skip


def wait_equal(root_dsn: str, dsns: list[str], timeout: float = 180) -> None:
    import time

    deadline = time.monotonic() + timeout
    want = rows(root_dsn)
    while True:
        states = [sql(d, "select merge_state from ferry.table_info where local") for d in dsns]
        if all(s == [("ok",)] for s in states) and all(rows(d) == want for d in dsns):
            return
        assert time.monotonic() < deadline, f"not equal: {states}"
        time.sleep(0.2)


def build(make_cascade, dsns: list[str]) -> tuple[Cascade, list[Config]]:
    """root -> (branch ->)* leaf over ``dsns`` (nodes ``node0``, ``node1``, ...), the table
    on each, added everywhere."""
    c = make_cascade(loop_delay="0.05", exception_sleep="0.2", **SPARK)
    configs = []
    for i, dsn in enumerate(dsns):
        kind = "root" if i == 0 else "leaf" if i == len(dsns) - 1 else "branch"
        provider = f"node{i - 1}" if i else None
        configs.append(c.node(f"node{i}", dsn, kind, provider, job_name=f"n{i}"))
        sql(dsn, DDL)
    sql(dsns[0], ROWS, (1, 300))
    for i in range(len(dsns)):
        c.add(f"node{i}", TABLE)
    return c, configs


def replicating(c: Cascade):
    """The subscribers' workers and a ticker on the root, in threads."""
    return c.running(*list(c.dsns)[1:], every=0.2)


def load(root_dsn: str, start: int) -> None:
    sql(root_dsn, ROWS, (start, start + 200))
    sql(root_dsn, f"update {TABLE} set j = j || '{{\"u\": 1}}', iv = iv * 2 where id % 3 = 0")
    sql(root_dsn, f"delete from {TABLE} where id % 10 = 7")


def compare_ok(cfg: Config, capsys) -> None:
    capsys.readouterr()
    code = main([str(cfg.path), "compare"])
    out = capsys.readouterr().out
    assert code == 0 and "Results do not match" not in out, out


@pytest.mark.parametrize(("src", "dst"), [(15, 18), (18, 15)], ids=["15-to-18", "18-to-15"])
def test_one_major_to_another(new_db, make_cascade, capsys, src: int, dst: int) -> None:
    c, (root, leaf) = build(make_cascade, [new_db(src), new_db(dst)])
    with replicating(c):
        wait_equal(root.get(settings.DB), [leaf.get(settings.DB)])
        load(root.get(settings.DB), 1000)
        wait_equal(root.get(settings.DB), [leaf.get(settings.DB)])
        compare_ok(leaf, capsys)


def test_cascade_15_16_18(new_db, make_cascade, capsys) -> None:
    c, (root, branch, leaf) = build(make_cascade, [new_db(15), new_db(16), new_db(18)])
    with replicating(c):
        wait_equal(root.get(settings.DB), [branch.get(settings.DB), leaf.get(settings.DB)])
        load(root.get(settings.DB), 1000)
        wait_equal(root.get(settings.DB), [branch.get(settings.DB), leaf.get(settings.DB)])
        compare_ok(branch, capsys)
        compare_ok(leaf, capsys)  # its provider is a branch: compared at the branch's tick
        sql(leaf.get(settings.DB), f"set session_replication_role = replica;"
                            f" update {TABLE} set t = 'changed here' where id = 5")  # fmt: skip
        capsys.readouterr()
        assert main([str(leaf.path), "compare"]) == 1
        assert "Results do not match" in capsys.readouterr().out
