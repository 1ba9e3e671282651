"""`pgferry diff` names the differing keys: exactly the known ones, the same on every run."""

from __future__ import annotations

import json
import subprocess
import sys

from pipeline_sql import run_sql

DDL = "create table acct (id bigint primary key, owner text, balance numeric(12,2))"
FILL = "insert into acct select g, 'o' || g, g * 1.25 from generate_series(1, 3000) g"
CHANGES = (
    "delete from acct where id = 1234",  # only in the source: -
    "insert into acct values (5000, 'new owner', 1)",  # only in the destination: +
    "update acct set owner = null where id = 7",  # changed: !
)


def diff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pgferry", "diff", *args, "--set", "spark_master=local[2]"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_three_known_differences_exactly_and_stably(both) -> None:
    src, dst = both
    for connstr in (src, dst):
        run_sql(connstr, DDL, FILL)
    proc = diff(src, "acct", dst, "acct")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "public.acct: ok"
    proc = diff(src, "acct", dst, "acct", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["matches"] is True

    run_sql(dst, *CHANGES)
    first = diff(src, "acct", dst, "acct")
    assert first.returncode == 1, first.stderr
    lines = first.stdout.splitlines()
    assert lines[2] == "public.acct: Results do not match!"
    assert [line for line in lines if line[:2] in ("- ", "+ ", "! ")] == [
        "! id=7",
        "- id=1234",
        "+ id=5000",
    ]
    assert lines[3:] == [
        "! id=7",
        "    src: id=7, owner=o7, balance=8.75",
        "    dst: id=7, owner=NULL, balance=8.75",
        "- id=1234",
        "    src: id=1234, owner=o1234, balance=1542.50",
        "+ id=5000",
        "    dst: id=5000, owner='new owner', balance=1.00",
        "public.acct: 3 differing keys: 1 only in source (-), 1 only in destination (+),"
        " 1 changed (!)",
    ]
    again = diff(src, "acct", dst, "acct")
    assert again.stdout == first.stdout

    few = diff(src, "acct", dst, "acct", "--max-rows=1")
    assert few.returncode == 1
    rows = [line for line in few.stdout.splitlines() if line.startswith("    ")]
    assert rows == [
        "    src: id=7, owner=o7, balance=8.75",
        "    dst: id=7, owner=NULL, balance=8.75",
    ]
    assert "(rows shown for the first 1; --max-rows=N for more)" in few.stdout

    proc = diff(src, "acct", dst, "acct", "--json", "--max-rows=2")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["matches"] is False
    assert report["counts"] == {"only_in_source": 1, "only_in_destination": 1, "changed": 1}
    assert [(d["mark"], d["key"]) for d in report["differences"]] == [
        ("!", {"id": "7"}),
        ("-", {"id": "1234"}),
        ("+", {"id": "5000"}),
    ]
    assert report["differences"][1]["src"]["owner"] == "o1234"
    assert report["differences"][1]["dst"] is None
    assert "src" not in report["differences"][2]  # beyond --max-rows: the key only
