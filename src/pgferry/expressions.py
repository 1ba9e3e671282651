"""Operator-written SQL expressions: copy conditions, capture options, ``--where`` of diff/repair.

Such text is pasted into queries that run on the provider, so it is accepted only as ONE
expression: PostgreSQL's own parser (pglast) reads it as the single target of a bare
SELECT, and anything else (a second statement, a FROM or LIMIT, a comment that could hide
the rest of the query, unbalanced parentheses) is refused with one line.  What pgferry runs
is the parser's rendering of that expression, wrapped in parentheses, so what runs is
exactly what was checked.  The server checks column names and the boolean type when the
expression is first used, in a read-only transaction (see :func:`check_on_table`).  Replay
evaluates such an expression on an event's captured row image through :func:`on_row_image`.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgferry.db import error_text
from pgferry.errors import TableError, UsageError

# Clauses that turn "SELECT expr" into more than an expression.
_CLAUSES = (
    "distinctClause", "intoClause", "fromClause", "whereClause", "groupClause",
    "havingClause", "windowClause", "valuesLists", "sortClause", "limitOffset",
    "limitCount", "lockingClause", "withClause", "larg", "rarg",
)  # fmt: skip


def boolean_expression(text: str, what: str = "condition") -> str:
    """The normalised text of ``text`` if it is one SQL expression; UsageError otherwise."""
    return _one(text, what, "one boolean expression")


def one_expression(text: str, what: str = "expression") -> str:
    """As :func:`boolean_expression`, for an expression of any type (a value to store)."""
    return _one(text, what, "one expression")


# pglast is imported where an expression is parsed: loading its parser costs a tenth of a
# second, which every worker and command would pay at start without an expression to read.


def _one(text: str, what: str, kind: str) -> str:
    from pglast import ast, parse_sql
    from pglast.parser import ParseError, scan
    from pglast.stream import RawStream

    if not text or not text.strip():
        raise UsageError(f"{what}: empty expression")
    try:
        stmts = parse_sql("select " + text)
    except ParseError as exc:
        raise UsageError(f"{what}: not a valid SQL expression ({exc})") from None
    # A comment could hide what the operator meant to write: refuse rather than guess.
    if any(tok.name in ("SQL_COMMENT", "C_COMMENT") for tok in scan(text)):
        raise UsageError(f"{what}: comments are not allowed in an expression")
    stmt = stmts[0].stmt if len(stmts) == 1 else None
    if (
        not isinstance(stmt, ast.SelectStmt)
        or stmt.op not in (0, None)
        or any(getattr(stmt, clause, None) for clause in _CLAUSES)
        or len(stmt.targetList or ()) != 1
        or stmt.targetList[0].name is not None
        or _is_star(stmt.targetList[0].val)
    ):
        raise UsageError(f"{what}: must be {kind}, got {text!r}")
    return RawStream()(stmt.targetList[0].val)


def _is_star(node: object) -> bool:
    from pglast import ast

    return isinstance(node, ast.ColumnRef) and any(
        isinstance(f, ast.A_Star) for f in node.fields or ()
    )


def as_sql(text: str, what: str = "condition") -> sql.Composable:
    """``(expression)`` for a query, re-checked (stored text may predate the check)."""
    return sql.SQL("({})").format(sql.SQL(boolean_expression(text, what)))


# A row event's captured row image (its ev_data, JSON by column name) in replay's queries.
EVENT_IMAGE = sql.SQL("e.ev_data")


def on_row_image(
    text: str, table: tuple[str, str], image: sql.Composable = EVENT_IMAGE
) -> sql.Composable:
    """``(select <expression> from <image as table's row type>)``: the expression, checked
    as :func:`as_sql` does, evaluated on a captured row image (``image``, a JSON text; by
    default the event's) as a row of ``table`` (schema, name), whose columns it names."""
    return sql.SQL("(select {} from json_populate_record(null::{}, {}::json) as _r)").format(
        as_sql(text), sql.Identifier(*table), image
    )


def check_on_table(conn: psycopg.Connection, schema: str, table: str, text: str, what: str) -> str:
    """Normalise ``text`` and have the server evaluate it once on ``schema.table``'s row type.

    Returns the normalised expression.  The expression is evaluated on a row of NULLs (so
    column names and the boolean type are checked, and a function it calls really runs)
    inside a READ ONLY transaction: nothing it calls can write.
    """
    expr = boolean_expression(text, what)
    query = sql.SQL("select 1 from (select (null::{}).*) as {} where {}").format(
        sql.Identifier(schema, table), sql.Identifier(table), as_sql(expr, what)
    )
    try:
        with conn.transaction():
            conn.execute("set transaction read only")
            conn.execute(query)
    except psycopg.Error as exc:
        raise TableError(f"bad {what}: {error_text(exc)}") from None
    return expr


def check_value_on_table(
    conn: psycopg.Connection, schema: str, table: str, text: str, what: str
) -> str:
    """As :func:`check_on_table` for an expression of any type whose value is kept as text
    (``ev_extra3=`` of a capture): evaluated once on a row of NULLs, read-only."""
    expr = one_expression(text, what)
    query = sql.SQL("select ({})::text from (select (null::{}).*) as {}").format(
        sql.SQL(expr), sql.Identifier(schema, table), sql.Identifier(table)
    )
    try:
        with conn.transaction():
            conn.execute("set transaction read only")
            conn.execute(query)
    except psycopg.Error as exc:
        raise TableError(f"bad {what}: {error_text(exc)}") from None
    return expr


def conjunction(*texts: str | None) -> str | None:
    """``(a) and (b)`` of the expressions given (None and empty ones left out)."""
    parts = [t.strip() for t in texts if t and t.strip()]
    if len(parts) <= 1:
        return parts[0] if parts else None
    return " and ".join(f"({boolean_expression(p)})" for p in parts)


def column_names(text: str, what: str = "condition") -> set[str] | None:
    """The column names ``text`` refers to, or None when that cannot be told for sure
    (a sub-query, a qualified or whole-row reference)."""
    from pglast import ast, parse_sql

    expr = parse_sql("select " + boolean_expression(text, what))[0].stmt.targetList[0].val
    names: set[str] = set()
    for node in _walk(expr):
        if isinstance(node, ast.SubLink):
            return None
        if isinstance(node, ast.ColumnRef):
            fields = node.fields or ()
            if len(fields) != 1 or not isinstance(fields[0], ast.String):
                return None
            names.add(fields[0].sval)
    return names


def _walk(node: object):
    """Every AST node under ``node`` (itself included)."""
    from pglast import ast

    if isinstance(node, ast.Node):
        yield node
        for name in node:
            yield from _walk(getattr(node, name))
    elif isinstance(node, tuple | list):
        for item in node:
            yield from _walk(item)
