"""What a captured DDL event may run on a subscriber, checked before it runs.

``capture-ddl`` queues the statement that changed a replicated table on the root as an
``EXECUTE`` event named ``ddl <id>: <its start>`` (``ferry.ddl_queue``,
:func:`pgferry.scripts.ddl_capture.is_captured`).  The root isolates
the statement with a splitter written in SQL, since PostgreSQL's own parser (pglast) cannot
run inside the server; so every subscriber parses the event's text again here and runs it
only if it is exactly one ``ALTER TABLE``, ``COMMENT ON TABLE`` / ``COLUMN``,
``CREATE INDEX`` or ``DROP INDEX`` on the table the event names, with no subcommand that
changes rights, triggers, rules or other tables.  Anything else is a :class:`DdlRefused`:
replay records it (:mod:`pgferry.registry.refused`), logs it and passes over it.  What runs, runs
with the rights of the local table's owner (``SET LOCAL ROLE``), never the worker's.
"""

from __future__ import annotations

import pglast
import psycopg
from pglast import ast, enums, parse_sql

from pgferry.errors import PgferryError
from pgferry.scripts.attrs import ScriptAttrs
from pgferry.scripts.translate import comment_relation, qualified

# ALTER TABLE subcommands a table's DDL may not carry to subscribers: they hand out the
# table, switch off the subscriber's own triggers (deny, capture) or rules, change row
# security, or reach other tables.  Named, so that a pglast without one still loads.
_REFUSED_SUBCOMMANDS = {
    "AT_ChangeOwner": "OWNER TO",
    "AT_EnableTrig": "ENABLE TRIGGER",
    "AT_EnableAlwaysTrig": "ENABLE ALWAYS TRIGGER",
    "AT_EnableReplicaTrig": "ENABLE REPLICA TRIGGER",
    "AT_EnableTrigAll": "ENABLE TRIGGER ALL",
    "AT_EnableTrigUser": "ENABLE TRIGGER USER",
    "AT_DisableTrig": "DISABLE TRIGGER",
    "AT_DisableTrigAll": "DISABLE TRIGGER ALL",
    "AT_DisableTrigUser": "DISABLE TRIGGER USER",
    "AT_EnableRule": "ENABLE RULE",
    "AT_EnableAlwaysRule": "ENABLE ALWAYS RULE",
    "AT_EnableReplicaRule": "ENABLE REPLICA RULE",
    "AT_DisableRule": "DISABLE RULE",
    "AT_EnableRowSecurity": "ENABLE ROW LEVEL SECURITY",
    "AT_DisableRowSecurity": "DISABLE ROW LEVEL SECURITY",
    "AT_ForceRowSecurity": "FORCE ROW LEVEL SECURITY",
    "AT_NoForceRowSecurity": "NO FORCE ROW LEVEL SECURITY",
    "AT_AttachPartition": "ATTACH PARTITION",
    "AT_DetachPartition": "DETACH PARTITION",
    "AT_DetachPartitionFinalize": "DETACH PARTITION FINALIZE",
    "AT_AddInherit": "INHERIT",
    "AT_DropInherit": "NO INHERIT",
    "AT_AddOf": "OF",
    "AT_DropOf": "NOT OF",
    "AT_GenericOptions": "OPTIONS",
}
_RENAMES = (
    enums.ObjectType.OBJECT_TABLE,
    enums.ObjectType.OBJECT_COLUMN,
    enums.ObjectType.OBJECT_TABCONSTRAINT,
)


class DdlRefused(PgferryError):
    """A captured DDL event that is not one statement capture-ddl queues: not run."""


def _one_statement(text: str) -> ast.Node:
    try:
        raws = parse_sql(text)
    except pglast.parser.ParseError as exc:
        raise DdlRefused(f"cannot parse it: {exc}") from None
    if len(raws) != 1:
        raise DdlRefused(f"it holds {len(raws)} statements, captured DDL is one")
    return raws[0].stmt


def _subcommands(stmt: ast.AlterTableStmt) -> None:
    for cmd in stmt.cmds or ():
        name = getattr(cmd.subtype, "name", str(cmd.subtype))
        if name in _REFUSED_SUBCOMMANDS:
            raise DdlRefused(f"ALTER TABLE … {_REFUSED_SUBCOMMANDS[name]} is not replicated")


def statement_table(stmt: ast.Node) -> str | None:
    """The table (registry form) a statement of a captured kind is on; None for DROP INDEX
    (which names indexes only); raises :class:`DdlRefused` for any other statement."""
    if isinstance(stmt, ast.AlterTableStmt) and stmt.relation is not None:
        if stmt.objtype != enums.ObjectType.OBJECT_TABLE:
            raise DdlRefused(f"ALTER {stmt.objtype.name[7:]} is not captured DDL")
        _subcommands(stmt)
        return qualified(stmt.relation.schemaname, stmt.relation.relname)
    if isinstance(stmt, ast.RenameStmt) and stmt.renameType in _RENAMES and stmt.relation:
        # RENAME COLUMN says what it renames a column of (ALTER VIEW ... RENAME COLUMN
        # too); the other two kinds are a table's alone.
        column = enums.ObjectType.OBJECT_COLUMN
        if stmt.renameType == column and stmt.relationType != enums.ObjectType.OBJECT_TABLE:
            raise DdlRefused("a rename of a column of something other than a table")
        return qualified(stmt.relation.schemaname, stmt.relation.relname)
    if (
        isinstance(stmt, ast.AlterObjectSchemaStmt)
        and stmt.objectType == enums.ObjectType.OBJECT_TABLE
        and stmt.relation is not None
    ):
        return qualified(stmt.relation.schemaname, stmt.relation.relname)
    if isinstance(stmt, ast.CommentStmt):
        rv = comment_relation(stmt)
        if rv is None:
            raise DdlRefused("a COMMENT on something other than a table or column")
        return qualified(rv.schemaname, rv.relname)
    if isinstance(stmt, ast.IndexStmt) and stmt.relation is not None:
        return qualified(stmt.relation.schemaname, stmt.relation.relname)
    if isinstance(stmt, ast.DropStmt) and stmt.removeType == enums.ObjectType.OBJECT_INDEX:
        return None
    raise DdlRefused(f"{type(stmt).__name__} is not a statement capture-ddl queues")


def captured_table(text: str, attrs: ScriptAttrs) -> str:
    """The table (registry form, the root's name) that the captured statement ``text`` is
    on, checked as the root queues it: one statement of a captured kind, a ``DROP INDEX``
    with the header ``Local-Table`` naming its table and every other statement with no
    header.  Raises :class:`DdlRefused`."""
    stmt = _one_statement(text)
    table = statement_table(stmt)
    named = attrs.values.get("local-table", [])
    if table is None:
        if set(attrs.values) != {"local-table"} or len(named) != 1:
            raise DdlRefused("a DROP INDEX without its table's Local-Table header")
        return named[0]
    if attrs:
        raise DdlRefused("a header on a statement that capture-ddl queues without one")
    return table


def replicated_table(text: str, attrs: ScriptAttrs, replicated: set[str]) -> str:
    """:func:`captured_table`, which must be one of the tables the queue replicated when
    the statement was queued, or one this node replicates (``replicated``)."""
    table = captured_table(text, attrs)
    if table not in replicated:
        raise DdlRefused(f"it is on {table}, which the queue does not replicate")
    return table


def check_local(conn: psycopg.Connection, statement: str, local: str) -> None:
    """Check ``statement``, as translated for this node, against the local table
    ``local``: it is on that table, and a ``DROP INDEX`` drops only that table's indexes
    (an index that is not here is left to the statement, which fails or, IF EXISTS,
    does nothing)."""
    stmt = _one_statement(statement)
    table = statement_table(stmt)
    if table is not None:
        if table != local:
            raise DdlRefused(f"it is on {table}, not on {local}")
        return
    assert isinstance(stmt, ast.DropStmt)
    for names in stmt.objects:
        parts = [n.sval for n in names]
        index = qualified(parts[-2] if len(parts) >= 2 else None, parts[-1])
        row = conn.execute(
            "select i.indrelid = pg_catalog.to_regclass(%s)"
            "  from pg_catalog.pg_index i where i.indexrelid = pg_catalog.to_regclass(%s)",
            (local, index),
        ).fetchone()
        if row is not None and not row[0]:
            raise DdlRefused(f"DROP INDEX of {index}, which is not an index of {local}")


def table_owner(conn: psycopg.Connection, local: str) -> str:
    """The owner of the local table ``local``, whom the statement runs as; a worker that
    may not ``SET ROLE`` to it stops at the event (a grant fixes it, skip-event passes)."""
    row = conn.execute(
        """
        select pg_catalog.pg_get_userbyid(c.relowner),
               pg_catalog.pg_has_role(session_user, c.relowner, 'MEMBER'), session_user
          from pg_catalog.pg_class c where c.oid = pg_catalog.to_regclass(%s)
        """,
        (local,),
    ).fetchone()
    if row is None:
        raise PgferryError(f"captured DDL on table {local}, which is not here")
    owner, member, worker = row
    if not member:
        raise PgferryError(
            f"captured DDL on {local} runs as its owner {owner}, and role {worker} may not"
            f" SET ROLE to it: grant {owner} to {worker}, or skip-event"
        )
    return str(owner)


def owner_here(conn: psycopg.Connection, statements: list[str], local: str | None) -> str:
    """The role the captured statement, as translated for this node (``statements``), runs
    as: the owner of its local table ``local`` (None: not replicated here), once it is
    checked against that table."""
    if local is None or len(statements) != 1:
        raise DdlRefused("it would run here on a table this node does not replicate")
    check_local(conn, statements[0], local)
    return table_owner(conn, local)
