"""``capture-ddl on|off``: a root's DDL on replicated tables queued as it runs.

With capture on, event triggers on the root (``ferry.ddl_capture_end`` on
``ddl_command_end``; ``ferry.ddl_capture_drop_start`` and ``ferry.ddl_capture_drop`` for
``DROP INDEX``) queue each ``ALTER TABLE``, ``COMMENT`` and (unless ``--no-indexes``)
``CREATE INDEX`` / ``DROP INDEX`` that touches a replicated table as an ``EXECUTE`` event in
the statement's own transaction, and ``ferry.ddl_capture_drop_table`` fails a ``DROP TABLE``,
``DROP SCHEMA`` or ``DROP OWNED`` that would drop a replicated table (``remove-table``
first).  Subscribers replay a queued statement exactly like a script queued by
``execute`` (:mod:`pgferry.scripts.execute`): translated to their own table names, skipped
where the table is not replicated, a failure stopping only that node until ``skip-event``.
The statement is isolated on the root, in SQL (``ferry.ddl_isolate``), and a statement it
cannot isolate fails the root's transaction; see docs/ddl.md.

The event triggers are the database's (every queue of it shares them); the per-queue switch
is a row of ``ferry.ddl_capture``.  Creating event triggers needs a superuser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgferry.db import error_text
from pgferry.errors import NodeError, PgferryError
from pgferry.node.model import require_node

# (name, event, tags, function): the database's event triggers while any queue captures.
EVENT_TRIGGERS = (
    ("_ferry_ddl_end", "ddl_command_end", ("ALTER TABLE", "CREATE INDEX", "COMMENT"),
     "ddl_capture_end"),
    ("_ferry_ddl_drop_start", "ddl_command_start", ("DROP INDEX",), "ddl_capture_drop_start"),
    ("_ferry_ddl_drop", "sql_drop", ("DROP INDEX",), "ddl_capture_drop"),
    ("_ferry_ddl_drop_table", "sql_drop", ("DROP TABLE", "DROP SCHEMA", "DROP OWNED"),
     "ddl_capture_drop_table"),
)  # fmt: skip
CAPTURED = "ALTER TABLE, COMMENT ON TABLE / COLUMN"
CAPTURED_INDEXES = "CREATE INDEX, DROP INDEX"
# ferry.ddl_queue's name for the event: 'ddl ' and 12 hex digits of a random UUID.  Only
# that function (the root's event triggers) names an event so; `execute` refuses a file
# named like it.
CAPTURED_NAME = re.compile(r"ddl [0-9a-f]{12}: ")


def is_captured(file_name: str | None) -> bool:
    """True for an EXECUTE event that capture-ddl queued (by its name's form)."""
    return bool(file_name) and CAPTURED_NAME.match(file_name or "") is not None


@dataclass(frozen=True)
class CaptureState:
    queue: str
    on: bool
    indexes: bool
    triggers: tuple[str, ...]  # the event triggers present in the database

    def describe(self) -> list[str]:
        if not self.on:
            lines = [f"capture-ddl: off for queue {self.queue}"]
        else:
            what = CAPTURED + (f", {CAPTURED_INDEXES}" if self.indexes else "")
            lines = [
                f"capture-ddl: on for queue {self.queue}",
                f"  captured on replicated tables: {what}",
                "  not captured: CREATE TABLE, other objects (use execute)",
                "  refused: DROP TABLE / SCHEMA / OWNED reaching a replicated table"
                " (remove-table first)",
            ]
            missing = [t[0] for t in EVENT_TRIGGERS if t[0] not in self.triggers]
            if missing:
                lines.append(f"  event triggers missing: {', '.join(missing)} (run capture-ddl on)")
        return lines


def state(conn: psycopg.Connection, queue: str) -> CaptureState:
    row = conn.execute(
        "select indexes from ferry.ddl_capture where queue_name = %s", (queue,)
    ).fetchone()
    triggers = tuple(
        r[0]
        for r in conn.execute(
            "select evtname from pg_event_trigger where evtname = any(%s) order by evtname",
            ([t[0] for t in EVENT_TRIGGERS],),
        ).fetchall()
    )
    return CaptureState(queue, row is not None, bool(row and row[0]), triggers)


def _require_root(conn: psycopg.Connection, queue: str, switch: str) -> None:
    # Checked first: without it, nothing else may change.
    role, superuser = conn.execute(
        "select current_user, rolsuper from pg_roles where rolname = current_user"
    ).fetchone()
    if not superuser:
        raise PgferryError(
            f"capture-ddl {switch}: event triggers need a superuser; role {role} is not one"
        )
    node = require_node(conn, queue)
    if not node.is_root:
        raise NodeError(
            f"capture-ddl runs on the root only: node {node.node_name} is a {node.node_type}"
        )


def turn_on(conn: psycopg.Connection, queue: str, *, indexes: bool = True) -> CaptureState:
    """Record the queue's switch and make the event triggers, in the caller's transaction."""
    _require_root(conn, queue, "on")
    conn.execute(
        """
        insert into ferry.ddl_capture (queue_name, indexes) values (%s, %s)
        on conflict (queue_name) do update
            set indexes = excluded.indexes, turned_on_by = current_user, turned_on_at = now()
        """,
        (queue, indexes),
    )
    present = set(state(conn, queue).triggers)
    for name, event, tags, function in EVENT_TRIGGERS:
        if name in present:
            continue
        stmt = sql.SQL(
            "create event trigger {} on {} when tag in ({}) execute function ferry.{}()"
        ).format(
            sql.Identifier(name),
            sql.SQL(event),
            sql.SQL(", ").join(sql.Literal(t) for t in tags),
            sql.Identifier(function),
        )
        try:
            with conn.transaction():
                conn.execute(stmt)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise PgferryError(
                f"capture-ddl on: event triggers need a superuser ({error_text(exc)})"
            ) from None
    return state(conn, queue)


def turn_off(conn: psycopg.Connection, queue: str) -> CaptureState:
    """Remove the queue's switch; the event triggers go with the last queue's."""
    _require_root(conn, queue, "off")
    conn.execute("delete from ferry.ddl_capture where queue_name = %s", (queue,))
    left = conn.execute("select count(*) from ferry.ddl_capture").fetchone()[0]
    if not left:
        for name, *_ in EVENT_TRIGGERS:
            try:
                with conn.transaction():
                    conn.execute(
                        sql.SQL("drop event trigger if exists {}").format(sql.Identifier(name))
                    )
            except psycopg.errors.InsufficientPrivilege as exc:
                raise PgferryError(
                    f"capture-ddl off: dropping event triggers needs a superuser"
                    f" ({error_text(exc)})"
                ) from None
    return state(conn, queue)
