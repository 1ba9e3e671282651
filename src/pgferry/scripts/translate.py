"""Per-node translation of SQL scripts queued by ``execute``.

A script written on the root names the root's tables.  A subscriber may replicate a table
under another name (``--dest-table``, another schema) or not at all.  Each statement is
parsed with PostgreSQL's own parser (pglast / libpg_query) and planned per node:

- it names no replicated table: run as written;
- every replicated table it names is local here: run with those names rewritten to the
  local ones (the statement is re-printed from its parse tree);
- none of them is local here: skip it on this node;
- a statement that renames a replicated table (``RENAME TO``, ``SET SCHEMA``) whose local
  table has a name of its own (``--dest-table``): skipped, the local table keeps its name
  (:func:`table_renames` says what the registry then follows);
- a mix, or something we cannot rewrite safely (DO blocks, qualified column references to
  a renamed table): :class:`ScriptTranslateError` — raised on the root by
  :func:`check_script` before anything runs, so nothing is queued that would jam a node.

Scripts with a ``--*--`` attribute header are not translated: the header decides where the
script runs and ``@name@`` tags give local names (see :mod:`pgferry.scripts.attrs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pglast
from pglast import ast, enums, parse_sql
from pglast.keywords import UNRESERVED_KEYWORDS
from pglast.stream import RawStream
from pglast.visitors import Visitor

from pgferry.errors import PgferryError
from pgferry.registry.names import split_qualified

DEFAULT_SCHEMA = "public"
# Statements whose bodies are opaque to the parser: we cannot see which tables they touch.
_OPAQUE = (ast.DoStmt,)
_TRANSACTION_KINDS = {"TRANS_STMT_BEGIN", "TRANS_STMT_START", "TRANS_STMT_COMMIT"}


class ScriptTranslateError(PgferryError):
    """A statement that cannot be run safely on every node."""


def quote_ident(name: str) -> str:
    """Quote like PostgreSQL's quote_ident(): only when needed."""
    simple = (
        name
        and (name[0].islower() or name[0] == "_")
        and all(c.islower() or c.isdigit() or c == "_" for c in name)
    )
    if (
        simple
        and name.isascii()
        and (
            name
            not in pglast.keywords.RESERVED_KEYWORDS
            | pglast.keywords.TYPE_FUNC_NAME_KEYWORDS
            | pglast.keywords.COL_NAME_KEYWORDS
            or name in UNRESERVED_KEYWORDS
        )
    ):
        return name
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str | None, relname: str) -> str:
    """``schema.table`` in the registry's form (format('%I.%I'))."""
    return f"{quote_ident(schema or DEFAULT_SCHEMA)}.{quote_ident(relname)}"


@dataclass(frozen=True)
class PlannedStatement:
    """One statement of a script as it runs on one node (or is skipped there).

    ``moves``: the (old, new) registry names when it renames a replicated table or moves
    it to another schema; the registry follows the source's new name whether the statement
    runs here or not.
    """

    sql: str
    run: bool
    note: str = ""
    moves: tuple[str, str] | None = None


class _Collector(Visitor):
    def __init__(self) -> None:
        self.relations: list[ast.RangeVar] = []
        self.column_refs: list[ast.ColumnRef] = []

    def visit_RangeVar(self, ancestors, node: ast.RangeVar) -> None:
        self.relations.append(node)

    def visit_ColumnRef(self, ancestors, node: ast.ColumnRef) -> None:
        if len(node.fields) >= 3:
            self.column_refs.append(node)


def _statements(script: str) -> list[ast.RawStmt]:
    try:
        return list(parse_sql(script))
    except pglast.parser.ParseError as exc:
        raise ScriptTranslateError(f"cannot parse SQL: {exc}") from None


def _is_transaction_control(stmt: ast.Node) -> bool:
    return isinstance(stmt, ast.TransactionStmt) and str(stmt.kind.name) in _TRANSACTION_KINDS


def plan_script(
    script: str,
    *,
    queue_tables: set[str],
    local_names: Mapping[str, str],
) -> list[PlannedStatement]:
    """Plan every statement of ``script`` for one node.

    ``queue_tables``: every table replicated through the queue (registry form).
    ``local_names``: source name -> local name, for the tables replicated on this node.
    """
    plan: list[PlannedStatement] = []
    for number, raw in enumerate(_statements(script), start=1):
        stmt = raw.stmt
        if _is_transaction_control(stmt):
            continue  # the script runs inside pgferry's own transaction
        if isinstance(stmt, _OPAQUE):
            raise ScriptTranslateError(
                f"statement {number}: {type(stmt).__name__} bodies cannot be translated per node; "
                "split it into plain statements or add a --*-- Local-Table header"
            )
        collector = _Collector()
        collector(stmt)
        commented = comment_relation(stmt)
        if commented is not None:
            collector.relations.append(commented)
        named = [
            (rv, qualified(rv.schemaname, rv.relname))
            for rv in collector.relations
            if qualified(rv.schemaname, rv.relname) in queue_tables
        ]
        if not named:
            plan.append(PlannedStatement(RawStream()(stmt), True))
            continue
        moves = _rename(stmt)  # read before the names are rewritten below
        moved = moves[0] if moves else ""
        if moved not in queue_tables:
            moves = None  # the registry follows replicated tables only
        local = [name for _, name in named if name in local_names]
        foreign = sorted({name for _, name in named if name not in local_names})
        if not local:
            plan.append(
                PlannedStatement(
                    RawStream()(stmt), False, f"not replicated here: {', '.join(foreign)}", moves
                )
            )
            continue
        if foreign:
            raise ScriptTranslateError(
                f"statement {number} names tables replicated here and tables that are not "
                f"({', '.join(foreign)})"
            )
        for column_ref in collector.column_refs:
            parts = [getattr(f, "sval", None) for f in column_ref.fields]
            if None not in parts[:2] and qualified(parts[-3], parts[-2]) in local_names:
                raise ScriptTranslateError(
                    f"statement {number}: schema-qualified column reference "
                    f"{'.'.join(p or '*' for p in parts)}; use a table alias"
                )
        if moved in local_names and local_names[moved] != moved:
            plan.append(
                PlannedStatement(
                    RawStream()(stmt), False, f"{local_names[moved]} keeps its local name", moves
                )
            )
            continue
        renamed = []
        for rv, name in named:
            target = local_names[name]
            if target != name:
                rv.schemaname, rv.relname = split_qualified(target)
                renamed.append(f"{name} -> {target}")
        if commented is not None:
            _set_comment_relation(stmt, commented)
        plan.append(PlannedStatement(RawStream()(stmt), True, "; ".join(renamed), moves))
    return plan


def comment_relation(stmt: ast.Node) -> ast.RangeVar | None:
    """The table of ``COMMENT ON TABLE`` / ``COMMENT ON COLUMN`` (a name list, not a
    RangeVar), as a RangeVar that translation can rename like any other."""
    kinds = (enums.ObjectType.OBJECT_TABLE, enums.ObjectType.OBJECT_COLUMN)
    if not isinstance(stmt, ast.CommentStmt) or stmt.objtype not in kinds:
        return None
    names = [n.sval for n in stmt.object]
    if stmt.objtype == enums.ObjectType.OBJECT_COLUMN:
        names = names[:-1]
    if not 1 <= len(names) <= 2:
        return None
    return ast.RangeVar(schemaname=names[0] if len(names) == 2 else None, relname=names[-1])


def _set_comment_relation(stmt: ast.CommentStmt, rv: ast.RangeVar) -> None:
    column = [stmt.object[-1]] if stmt.objtype == enums.ObjectType.OBJECT_COLUMN else []
    table = [ast.String(sval=rv.schemaname)] if rv.schemaname else []
    stmt.object = (*table, ast.String(sval=rv.relname), *column)


def _rename(stmt: ast.Node) -> tuple[str, str] | None:
    """(old, new) registry names of the table a ``RENAME TO`` / ``SET SCHEMA`` statement
    moves, else None."""
    table = enums.ObjectType.OBJECT_TABLE
    if isinstance(stmt, ast.RenameStmt) and stmt.renameType == table and stmt.relation:
        schema = stmt.relation.schemaname
        return qualified(schema, stmt.relation.relname), qualified(schema, stmt.newname)
    if isinstance(stmt, ast.AlterObjectSchemaStmt) and stmt.objectType == table and stmt.relation:
        relname = stmt.relation.relname
        return qualified(stmt.relation.schemaname, relname), qualified(stmt.newschema, relname)
    return None


def table_renames(script: str, queue_tables: set[str]) -> list[tuple[str, str]]:
    """(old, new) registry names of the replicated tables that ``script`` renames or moves
    to another schema, in order: the registry follows them."""
    renames = (_rename(raw.stmt) for raw in _statements(script))
    return [r for r in renames if r is not None and r[0] in queue_tables]


@dataclass
class ShapeChanges:
    """What a script changes of the shape of tables (registry names): the columns it drops
    or renames, per table, and the tables it renames or moves (old, new), in order."""

    going: dict[str, set[str]] = field(default_factory=dict)
    renames: list[tuple[str, str]] = field(default_factory=list)


def shape_changes(script: str) -> ShapeChanges:
    """What ``script`` changes of the shape of any table: rows queued before it still carry
    the columns it takes away, under the table's old name.  Nothing for a script that does
    not parse (it fails when it runs, with its own message)."""
    out = ShapeChanges()
    try:
        statements = _statements(script)
    except ScriptTranslateError:
        return out
    column = enums.ObjectType.OBJECT_COLUMN
    for raw in statements:
        stmt = raw.stmt
        if isinstance(stmt, ast.RenameStmt) and stmt.renameType == column and stmt.relation:
            table = qualified(stmt.relation.schemaname, stmt.relation.relname)
            out.going.setdefault(table, set()).add(stmt.subname)
        elif isinstance(stmt, ast.AlterTableStmt) and stmt.relation:
            table = qualified(stmt.relation.schemaname, stmt.relation.relname)
            for cmd in stmt.cmds or ():
                if cmd.subtype == enums.AlterTableType.AT_DropColumn and cmd.name:
                    out.going.setdefault(table, set()).add(cmd.name)
        else:
            moves = _rename(stmt)
            if moves is not None:
                out.renames.append(moves)
    return out


def drop_index_here(script: str, source: str, local: str) -> str:
    """``DROP INDEX`` of indexes in the schema of table ``source``, as queued by capture-ddl
    (with the header ``Local-Table: source``), re-aimed at the schema of its local table
    ``local``: where the table was created, its captured indexes were too."""
    source_schema, _ = split_qualified(source)
    local_schema, _ = split_qualified(local)
    if source_schema == local_schema:
        return script
    out = []
    for raw in _statements(script):
        stmt = raw.stmt
        if isinstance(stmt, ast.DropStmt) and stmt.removeType == enums.ObjectType.OBJECT_INDEX:
            objects = []
            for names in stmt.objects:
                parts = [n.sval for n in names]
                if (parts[0] if len(parts) == 2 else DEFAULT_SCHEMA) == source_schema:
                    parts = [local_schema, parts[-1]]
                objects.append(tuple(ast.String(sval=p) for p in parts))
            stmt.objects = tuple(objects)
        out.append(RawStream()(stmt))
    return ";\n".join(out)


def check_script(script: str, *, queue_tables: set[str]) -> None:
    """Root-side validation: raise now for anything a subscriber could not translate."""
    plan_script(script, queue_tables=queue_tables, local_names={t: t for t in queue_tables})


def statements_naming(script: str, queue_tables: set[str]) -> list[tuple[str, list[str]]]:
    """Each statement of ``script`` that names replicated tables, as its own text (as
    written, comments between statements left out), with those tables in registry form,
    in order and each once: what a reader of the queue needs to follow their schema."""
    out = []
    for raw in _statements(script):
        collector = _Collector()
        collector(raw.stmt)
        commented = comment_relation(raw.stmt)
        if commented is not None:
            collector.relations.append(commented)
        names = [qualified(rv.schemaname, rv.relname) for rv in collector.relations]
        named = list(dict.fromkeys(n for n in names if n in queue_tables))
        if not named:
            continue
        # pglast gives locations in characters; a length of 0 runs to the end.
        start = raw.stmt_location or 0
        end = start + raw.stmt_len if raw.stmt_len else len(script)
        out.append((script[start:end].strip(), named))
    return out
