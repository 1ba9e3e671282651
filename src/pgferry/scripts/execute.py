"""``execute``: run SQL scripts on the root and replay them on every node in queue order.

On the root, each file runs in one transaction together with the insertion of an
``EXECUTE`` event into the queue, so subscribers see the script exactly between the row
changes that came before and after it.  Each node runs a script once: it is recorded in
``ferry.applied_execute`` by file name and content hash.

A subscriber replays a queued script at its place in a batch
(:mod:`pgferry.apply.replay.script_replay`) and runs its statements, as translated for the node,
with :func:`run_queued`.  A script that ``capture-ddl`` queued (named ``ddl <id>: ...``) is
checked by :mod:`.ddl_check` before it runs on a subscriber, and runs as the local table's
owner.

Event layout: ``ev_data`` = the script, ``ev_extra1`` = file name, ``ev_extra2`` = header
attributes, ``ev_extra3`` = sha256 of the script, ``ev_extra4`` = JSON list of the tables the
queue replicated when the script was queued (so every node can tell "a replicated table I
do not have" from "a table unrelated to replication").
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from pgferry.db import SESSION_SETTINGS
from pgferry.errors import NodeError, PgferryError
from pgferry.events import EXECUTE_EVENT, script_hash
from pgferry.node import capture
from pgferry.node.model import require_node
from pgferry.queue import api as queue_api
from pgferry.registry import entries
from pgferry.scripts import ddl_capture
from pgferry.scripts.attrs import (
    ScriptAttrs,
    applies_here,
    node_objects,
    parse_attrs,
    replace_tags,
)
from pgferry.scripts.translate import plan_script, table_renames

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Script:
    """One SQL file to execute: name (basename), text, content hash, header attributes."""

    name: str
    sql: str
    sha256: str
    attrs: ScriptAttrs

    @classmethod
    def from_text(cls, name: str, text: str) -> Script:
        return cls(name, text, script_hash(text), parse_attrs(text))


def load_script(path: str | Path) -> Script:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PgferryError(f"SQL file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PgferryError(f"cannot read SQL file {path}: {exc}") from None
    if not text.strip():
        raise PgferryError(f"SQL file is empty: {path}")
    return Script.from_text(path.name, text)


def _applied_hash(conn: psycopg.Connection, queue: str, name: str) -> str | None:
    row = conn.execute(
        "select file_hash from ferry.applied_execute where queue_name = %s and file_name = %s",
        (queue, name),
    ).fetchone()
    return row[0] if row else None


def _record(conn: psycopg.Connection, queue: str, name: str, sha256: str, text: str) -> None:
    conn.execute(
        """
        insert into ferry.applied_execute (queue_name, file_name, file_hash, file_sql)
        values (%s, %s, %s, %s)
        on conflict (queue_name, file_name) do update
            set file_hash = excluded.file_hash, file_sql = excluded.file_sql,
                executed_at = now()
        """,
        (queue, name, sha256, text),
    )


# What a script's bare names resolve to: ``public`` (as the original resolved them, and as
# capture-ddl queues a public table's statement), pg_catalog searched first all the same.
# pgferry's own SQL runs on db.SESSION_SETTINGS' path, put back right after the script:
# the apply transaction goes on with other events.
SCRIPT_SEARCH_PATH = "public, pg_temp"


def _run_statements(conn: psycopg.Connection, statements: list[str]) -> None:
    if not statements:
        return
    conn.execute("select pg_catalog.set_config('search_path', %s, true)", (SCRIPT_SEARCH_PATH,))
    for statement in statements:
        conn.execute(sql.SQL(statement))  # type: ignore[arg-type] - parsed and re-printed SQL
    conn.execute(
        "select pg_catalog.set_config('search_path', %s, true)",
        (SESSION_SETTINGS["search_path"],),
    )


def execute_on_root(
    conn: psycopg.Connection, queue: str, scripts: list[Script], *, force: bool = False
) -> list[str]:
    """Run ``scripts`` on the root and queue them; returns one message per script.

    Every script is checked before the first one runs: a refused script changes nothing.
    """
    node = require_node(conn, queue)
    if not node.is_root:
        raise NodeError(f"Node is not root node: {queue}")
    queue_tables = sorted(t.table_name for t in entries.list_tables(conn, queue))
    todo: list[tuple[Script, list[str]]] = []
    messages: list[str] = []
    for script in scripts:
        if ddl_capture.is_captured(script.name):
            raise PgferryError(
                f"{script.name}: a script may not be named as capture-ddl names its"
                " statements (ddl <id>: ...); rename the file"
            )
        seen = _applied_hash(conn, queue, script.name)
        if seen == script.sha256 and not force:
            messages.append(f"{script.name}: already executed, skipping")
            continue
        if seen is not None and not force:
            raise PgferryError(
                f"{script.name}: a different script with this name was executed before; "
                "rename the file or use --force"
            )
        todo.append((script, _root_statements(conn, script, queue_tables)))
    conn.commit()
    for script, statements in todo:
        with conn.transaction():
            # Row changes made by the script reach subscribers through the script itself, so
            # capture must not queue them too; replica role silences the capture triggers and
            # makes the root run the script exactly as every subscriber will.
            conn.execute("set local session_replication_role = replica")
            log.info("Executing: %s", script.name)
            _run_statements(conn, statements)
            # A renamed table keeps its registry entry and its capture (whose trigger
            # passes the table's name) under the new name.
            for old, new in table_renames(script.sql, set(queue_tables)):
                entries.rename_table(conn, queue, old, new)
                capture.attach(conn, queue, new, deny=False)
            # Functions of captures with options name the columns: made again for the
            # tables as the script left them (a spec they no longer meet fails the script).
            capture.refresh_specs(conn, queue)
            _record(conn, queue, script.name, script.sha256, script.sql)
            queue_api.insert_event(
                conn,
                queue,
                EXECUTE_EVENT,
                script.sql,
                script.name,
                script.attrs.to_text(),
                script.sha256,
                json.dumps(queue_tables),
            )
        messages.append(f"{script.name}: executed and queued")
        log.info("Execute finished: %s", script.name)
    return messages


def _root_statements(
    conn: psycopg.Connection, script: Script, queue_tables: list[str]
) -> list[str]:
    if script.attrs:
        text = replace_tags(script.sql, {t: t for t in queue_tables})
        if not applies_here(script.attrs, node_objects(conn, set(queue_tables), {})):
            return []
        return [p.sql for p in plan_script(text, queue_tables=set(), local_names={})]
    plan = plan_script(
        script.sql, queue_tables=set(queue_tables), local_names={t: t for t in queue_tables}
    )
    return [p.sql for p in plan if p.run]


def run_queued(
    conn: psycopg.Connection,
    queue: str,
    name: str,
    text: str,
    sha256: str,
    statements: list[str],
    *,
    role: str | None = None,
) -> None:
    """Run the statements of the queued script ``name`` (``text``, ``sha256``), as planned for this
    node, in the caller's (applying) transaction, and note the script as run here (also
    when it has none to run here).  ``role``: whom they run as (a captured statement runs
    as its local table's owner: a default or a USING expression runs as the role that
    could have typed the statement here, not as the worker, often a superuser)."""
    if role is not None:
        conn.execute(sql.SQL("set local role {}").format(sql.Identifier(role)))
    _run_statements(conn, statements)
    if role is not None:
        conn.execute("reset role")
    _record(conn, queue, name, sha256, text)
