"""`pgferry diff` as an operator runs it: a subprocess, its output and exit status."""

from __future__ import annotations

import subprocess
import sys

from pipeline_sql import fetch, run_sql

DDL = "create table acct (id bigint primary key, owner text, balance numeric(12,2))"
FILL = "insert into acct select g, 'o' || g, g * 1.25 from generate_series(1, 3000) g"


def diff(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pgferry", "diff", *args, "--set", "spark_master=local[2]"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_diff_reports_then_repairs(both, tmp_path) -> None:
    src, dst = both
    for connstr in (src, dst):
        run_sql(connstr, DDL, FILL)
    run_sql(dst, "delete from acct where id = 1234", "update acct set owner = null where id = 7")
    proc = diff(src, "acct", dst, "public.acct")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("srcdb: 3000 rows, checksum=")
    assert lines[1].startswith("dstdb: 2999 rows, checksum=")
    assert lines[2] == "public.acct: Results do not match!"
    assert "- id=1234" in lines and "! id=7" in lines
    assert "Traceback" not in proc.stderr

    fix = tmp_path / "fix.sql"
    proc = diff(src, "acct", dst, "public.acct", "--repair", str(fix), "--apply")
    assert proc.returncode == 0, proc.stderr
    assert "missed 1 inserts, 1 updates, 0 deletes (applied)" in proc.stdout
    assert "insert into" in fix.read_text()
    assert fetch(dst, "select owner from acct where id in (7, 1234) order by id") == [
        ("o7",),
        ("o1234",),
    ]


def test_diff_where_limits_both_sides(both) -> None:
    src, dst = both
    for connstr in (src, dst):
        run_sql(connstr, DDL, FILL)
    run_sql(dst, "delete from acct where id > 2000")
    proc = diff(src, "acct", dst, "acct", "--where", "id <= 2000")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "public.acct: ok"
    # An error inside the Spark tasks still ends as one line, without Spark's stack dump.
    proc = diff(src, "acct", dst, "acct", "--where", "nosuch > 1")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].endswith('column "nosuch" does not exist')
    assert "Traceback" not in proc.stderr and "at org.apache" not in proc.stderr


def test_diff_input_errors_are_one_line(both) -> None:
    src, dst = both
    run_sql(src, DDL, "create table nokey (a int)", "create table other (id bigint primary key)")
    run_sql(dst, DDL.replace("balance", "saldo"), "create table nokey (a int)")
    cases = [
        (("acct", "missing"), "unknown table missing"),
        (
            ("acct", "acct"),
            "different columns (only in source: balance; only in destination: saldo)",
        ),
        (("nokey", "nokey"), "has no primary key"),
        (("bad..name", "acct"), "invalid table name"),
    ]
    for (src_table, dst_table), message in cases:
        proc = diff(src, src_table, dst, dst_table)
        assert proc.returncode != 0
        err = proc.stderr.strip().splitlines()
        assert len(err) == 1 and message in err[0], proc.stderr
        assert err[0].startswith("pgferry: ")
    proc = diff(src, "acct", "host=127.0.0.1 port=1 password=s3cret dbname=x", "acct")
    assert proc.returncode != 0 and "s3cret" not in proc.stderr + proc.stdout
    proc = diff(src, "acct", dst, "acct", "--apply")
    assert proc.returncode == 2 and "--apply needs --repair" in proc.stderr


def test_diff_where_is_one_expression(both) -> None:
    src, dst = both
    for connstr in (src, dst):
        run_sql(connstr, DDL)
    run_sql(src, "create table victim (id int)")
    for where in (
        "true; drop table victim",
        "id > 0) or (true",
        "id > 0 -- ) and false",
        "true) union select 1 from victim where (true",
    ):
        proc = diff(src, "acct", dst, "acct", "--where", where)
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1 and "--where" in err[0], proc.stderr
    assert fetch(src, "select to_regclass('victim') is not null") == [(True,)]
