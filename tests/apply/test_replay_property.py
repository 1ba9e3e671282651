"""Property: random mixes of row changes on a table of many types replicate exactly."""

from __future__ import annotations

import datetime as dt
import decimal
import ipaddress
import uuid

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

DDL = """
create table public.many (
    id int primary key, b bigint, t text, d date, n numeric, ts timestamp, ts0 timestamp(0),
    iv interval, ip inet, by bytea, js jsonb, arr int[], u uuid, ok boolean,
    f double precision, big bigserial
)
"""
COLS = ("b", "t", "d", "n", "ts", "ts0", "iv", "ip", "by", "js", "arr", "u", "ok", "f")

keys = st.integers(1, 25)
text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20
)
values = st.fixed_dictionaries(
    {
        "b": st.none() | st.integers(-(2**63), 2**63 - 1),
        "t": st.none() | text,
        "d": st.none() | st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
        "n": st.none()
        | st.decimals(allow_nan=False, places=4, min_value=-(10**9), max_value=10**9),
        "ts": st.none() | st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)),
        "ts0": st.none() | st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)),
        "iv": st.none() | st.timedeltas(dt.timedelta(days=-9999), dt.timedelta(days=9999)),
        "ip": st.none() | st.ip_addresses().map(lambda a: ipaddress.ip_interface(a)),
        "by": st.none() | st.binary(max_size=16),
        "js": st.none() | st.dictionaries(text, st.integers(-(2**53), 2**53) | text, max_size=3),
        "arr": st.none() | st.lists(st.none() | st.integers(-1000, 1000), max_size=4),
        "u": st.none() | st.uuids(),
        "ok": st.none() | st.booleans(),
        "f": st.none() | st.floats(allow_nan=True, allow_infinity=True),
    }
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), keys, values),
        st.tuples(st.just("update"), keys, values),
        st.tuples(st.just("move"), keys, keys),
        st.tuples(st.just("delete"), keys),
        st.tuples(st.just("truncate")),
    ),
    max_size=25,
)


def _params(v: dict) -> list:
    out = []
    for c in COLS:
        x = v[c]
        out.append(Jsonb(x) if c == "js" and x is not None else x)
    return out


def _apply(conn: psycopg.Connection, op: tuple) -> None:
    kind = op[0]
    cols = ", ".join(COLS)
    marks = ", ".join(["%s"] * len(COLS))
    if kind == "insert":
        conn.execute(
            f"insert into many (id, {cols}) values (%s, {marks}) on conflict do nothing",
            [op[1], *_params(op[2])],
        )
    elif kind == "update":
        sets = ", ".join(f"{c} = %s" for c in COLS)
        conn.execute(f"update many set {sets} where id = %s", [*_params(op[2]), op[1]])
    elif kind == "move":
        conn.execute(
            "update many set id = %s where id = %s"
            " and not exists (select 1 from many where id = %s)",
            (op[2], op[1], op[2]),
        )
    elif kind == "delete":
        conn.execute("delete from many where id = %s", (op[1],))
    else:
        conn.execute("truncate many")


# Inline reads, and reads ahead in ev_id ranges of a few events: tables with updates
# read whole, or in ranges merged on the subscriber.
RANGES = {"replay_read_ahead_events": "0", "replay_read_range_events": "3"}
READS = {
    "inline": {},
    "ranges": RANGES,
    "ranges-merged": {**RANGES, "replay_merge_ranges": "on"},
}


@pytest.mark.parametrize("reads", list(READS))
def test_random_changes_replicate(make_pair, reads) -> None:
    pair = make_pair(**READS[reads])
    pair.root(DDL)
    pair.leaf(DDL)
    pair.add_tables("public.many")
    worker = pair.catch_up()

    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(batches=st.lists(ops, min_size=1, max_size=3))
    def check(batches) -> None:
        with psycopg.connect(pair.root_dsn, autocommit=True) as conn:
            for batch in batches:
                with conn.transaction():
                    for op in batch:
                        _apply(conn, op)
        pair.catch_up(worker)
        q = "select t::text from many t order by id"
        assert pair.leaf(q) == pair.root(q)

    check()


def test_types_round_trip_exactly(pair) -> None:
    pair.root(DDL)
    pair.leaf(DDL)
    pair.add_tables("public.many")
    worker = pair.catch_up()
    row = {
        "b": -(2**63),
        "t": "tab\tnew\nline 'quote' \"dq\" \\ üñí",
        "d": dt.date(1, 1, 1),
        "n": decimal.Decimal("-12345678901234567890.0000000001"),
        "ts": dt.datetime(2012, 2, 29, 23, 59, 59, 999999),
        "ts0": dt.datetime(2012, 2, 29, 23, 59, 59),
        "iv": dt.timedelta(days=-3, microseconds=1),
        "ip": ipaddress.ip_interface("2001:db8::1/64"),
        "by": b"\x00\xff\\x",
        "js": {"a": [1, 2.5, None, "x"]},
        "arr": [1, None, -3],
        "u": uuid.uuid4(),
        "ok": False,
        "f": float("-inf"),
    }
    with psycopg.connect(pair.root_dsn, autocommit=True) as conn:
        _apply(conn, ("insert", 1, row))
        _apply(conn, ("insert", 2, dict.fromkeys(COLS)))
        _apply(conn, ("insert", 3, {**row, "f": float("nan"), "n": decimal.Decimal("NaN")}))
    pair.catch_up(worker)
    q = "select t::text from many t order by id"
    assert pair.leaf(q) == pair.root(q)
