"""Parsing table names and patterns as the operator types them (no database needed)."""

from __future__ import annotations

import pytest

from pgferry.errors import UsageError
from pgferry.registry.names import parse_pattern, split_qualified

pytestmark = pytest.mark.pure

CANDIDATES = [
    ("public", "t1"),
    ("public", "t2"),
    ("digoal_01", "user_info"),
    ("digoal_01", "user_session"),
    ("My Schema", "Tbl"),
    ("My Schema", "tbl"),
    ("sché", "Données"),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("t1", [("public", "t1")]),
        ("T1", [("public", "t1")]),
        ("digoal_01.user_info", [("digoal_01", "user_info")]),
        ("digoal_01.*", [("digoal_01", "user_info"), ("digoal_01", "user_session")]),
        ("public.t?", [("public", "t1"), ("public", "t2")]),
        ('"My Schema"."Tbl"', [("My Schema", "Tbl")]),
        ('"My Schema".tbl', [("My Schema", "tbl")]),
        ('"My Schema".TBL', [("My Schema", "tbl")]),
        ('"My Schema".*', [("My Schema", "Tbl"), ("My Schema", "tbl")]),
        ("sché.Données", [("sché", "Données")]),
        ("nosuch", []),
    ],
)
def test_select(raw, expected):
    assert parse_pattern(raw).select(CANDIDATES) == expected


def test_quotes_inside_names():
    pattern = parse_pattern('"a""b"."c.d"')
    assert (pattern.schema.text, pattern.name.text) == ('a"b', "c.d")
    assert split_qualified('"a""b"."c.d"') == ('a"b', "c.d")


@pytest.mark.parametrize("raw", ["a.b.c", '"open', "a.", '"x"y'])
def test_bad_names(raw):
    with pytest.raises(UsageError):
        parse_pattern(raw)
