"""Operator-written expressions are accepted as one expression and rendered as parsed."""

from __future__ import annotations

import pytest

from pgferry import expressions
from pgferry.errors import UsageError
from pgferry.expressions import as_sql, boolean_expression

pytestmark = pytest.mark.pure


@pytest.mark.parametrize(
    ("text", "rendered"),
    [
        ("userid<1000", "userid < 1000"),
        (
            "region = 'eu' and \"Mixed Case\" is not null",
            "region = 'eu' AND \"Mixed Case\" IS NOT NULL",
        ),
        ("id in (select id from other)", "id IN (SELECT id FROM other)"),
        ("(a = 1) or (b = 2)", "a = 1 OR b = 2"),
        ("name = 'x -- not a comment'", "name = 'x -- not a comment'"),
    ],
)
def test_one_expression_is_rendered(text: str, rendered: str) -> None:
    assert boolean_expression(text) == rendered
    assert as_sql(text).as_string(None) == f"({rendered})"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "true; drop table t",
        "true) limit 0; drop table t; select 1 where (true",
        "a = 1) or (b = 2",
        "(a = 1",
        "a = 1)",
        "a = 1 -- ) or true",
        "a = 1 /* comment */",
        "1 from t",
        "true as x",
        "a, b",
        "true union select true",
        "true) union select 1 from t where (true",
        "true order by 1",
        "* ",
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--where"):
        boolean_expression(text, "--where")


def test_column_names_and_conjunction():
    assert expressions.column_names('(hashtext(("Id")::text) & 3) = 1 and a > 2') == {"Id", "a"}
    assert expressions.column_names("exists (select 1 from t)") is None  # cannot tell
    assert expressions.column_names("t.a = 1") is None
    assert expressions.conjunction(None, " ") is None
    assert expressions.conjunction("a > 1", None) == "a > 1"
    assert expressions.conjunction("a > 1", "b or c") == "(a > 1) and (b OR c)"
