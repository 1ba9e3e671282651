"""``execute``: run SQL scripts on the root and replay them on every node in queue order.

On the root, each file runs in one transaction together with the insertion of an
``EXECUTE`` event into the queue, so subscribers see the script exactly between the row
changes that came before and after it.  Each node runs a script once: it is recorded in
``ferry.applied_execute`` by file name and content hash.

A script that ``capture-ddl`` queued (named ``ddl <id>: ...``) is checked by
:mod:`.ddl_check` before it runs on a subscriber, and runs as the local table's owner.

Event layout: ``ev_data`` = the script, ``ev_extra1`` = file name, ``ev_extra2`` = header
attributes, ``ev_extra3`` = sha256 of the script, ``ev_extra4`` = JSON list of the tables the
queue replicated when the script was queued (so every node can tell "a replicated table I
do not have" from "a table unrelated to replication").
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from pgferry.db import SESSION_SETTINGS
from pgferry.errors import NodeError, PgferryError, UsageError
from pgferry.events import EXECUTE_EVENT
from pgferry.node import capture, merge
from pgferry.node.model import require_node
from pgferry.queue import api as queue_api
from pgferry.registry import entries, names
from pgferry.scripts import ddl_check
from pgferry.scripts.attrs import (
    NodeObjects,
    ScriptAttrs,
    applies_here,
    parse_attrs,
    replace_tags,
)
from pgferry.scripts.translate import drop_index_here, plan_script, table_renames

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
        return cls(name, text, hashlib.sha256(text.encode()).hexdigest(), parse_attrs(text))


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


def _record(conn: psycopg.Connection, queue: str, script: Script) -> None:
    conn.execute(
        """
        insert into ferry.applied_execute (queue_name, file_name, file_hash, file_sql)
        values (%s, %s, %s, %s)
        on conflict (queue_name, file_name) do update
            set file_hash = excluded.file_hash, file_sql = excluded.file_sql,
                executed_at = now()
        """,
        (queue, script.name, script.sha256, script.sql),
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
        if ddl_check.is_captured(script.name):
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
            _record(conn, queue, script)
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


def apply_script_event(
    conn: psycopg.Connection,
    queue: str,
    *,
    script_sql: str,
    file_name: str,
    attrs_text: str | None,
    queue_tables_json: str | None,
    local_names: Mapping[str, str],
    local_seqs: set[str] | frozenset[str] = frozenset(),
) -> bool:
    """Run a queued script on a subscriber inside the caller's apply transaction.

    ``local_names`` maps each table replicated here (source name) to its local name.
    Returns False when the script was skipped (already applied or not for this node).
    A captured DDL statement that :mod:`.ddl_check` refuses raises
    :class:`~pgferry.scripts.ddl_check.DdlRefused` before anything runs.
    """
    script = Script.from_text(file_name, script_sql)
    if _applied_hash(conn, queue, file_name) == script.sha256:
        log.info("%s: already executed here, skipping", file_name)
        return False
    if merge.script_applied(conn, queue, file_name, script.sha256):
        log.info("%s: already executed here by another part of the merged set", file_name)
        return False
    attrs = ScriptAttrs.from_text(attrs_text)
    queue_tables = set(json.loads(queue_tables_json)) if queue_tables_json else set(local_names)
    captured = ddl_check.is_captured(file_name)
    source = ddl_check.captured_table(script_sql, attrs) if captured else None
    if source is not None and source not in queue_tables and source not in local_names:
        raise ddl_check.DdlRefused(f"it is on {source}, which the queue does not replicate")
    if attrs:
        if not applies_here(attrs, node_objects(conn, set(local_names), local_names, local_seqs)):
            log.info("%s: does not need to run on this node", file_name)
            _record(conn, queue, script)
            return False
        text = replace_tags(script_sql, local_names)
        for table in attrs.values.get("local-table", [])[:1]:
            text = drop_index_here(text, table, local_names.get(table, table))
        statements = [p.sql for p in plan_script(text, queue_tables=set(), local_names={})]
    else:
        plan = plan_script(script_sql, queue_tables=queue_tables, local_names=local_names)
        for step in plan:
            if not step.run:
                log.info("%s: skipped here (%s): %s", file_name, step.note, step.sql)
            elif step.note:
                log.info("%s: translated (%s)", file_name, step.note)
        statements = [p.sql for p in plan if p.run]
    log.info("Executing: %s", file_name)
    if source is not None and statements:
        _run_captured(conn, statements, local_names.get(source))
    else:
        _run_statements(conn, statements)
    for old, new in table_renames(script_sql, queue_tables) if not attrs else []:
        entries.rename_table(conn, queue, old, new)  # the source's new name, here too
    _record(conn, queue, script)
    log.info("Execute finished: %s", file_name)
    return True


def _run_captured(conn: psycopg.Connection, statements: list[str], local: str | None) -> None:
    """Run a captured statement, translated for this node, as its local table's owner."""
    if local is None or len(statements) != 1:
        raise ddl_check.DdlRefused("it would run here on a table this node does not replicate")
    ddl_check.check_local(conn, statements[0], local)
    owner = ddl_check.table_owner(conn, local)
    # The owner's rights, not the worker's (often a superuser): a default or a USING
    # expression runs as the role that could have typed the statement here.
    conn.execute(sql.SQL("set local role {}").format(sql.Identifier(owner)))
    _run_statements(conn, statements)
    conn.execute("reset role")


def qualify_public(name: str) -> str:
    """A header's object name with public's schema when it names none."""
    try:
        parts = names.split_name(name.strip())
    except UsageError:
        return name
    return f"public.{name.strip()}" if len(parts) == 1 else name


def node_objects(
    conn: psycopg.Connection,
    local_tables: set[str],
    local_names: Mapping[str, str],
    local_seqs: set[str] | frozenset[str] = frozenset(),
) -> NodeObjects:
    """Answer header attribute checks from this node's registry and catalog."""

    def exists(query: str, name: str) -> bool:
        return bool(conn.execute(query, (name,)).fetchone()[0])

    def function_exists(spec: str) -> bool:
        name, _, nargs = spec.partition("(")
        count = int(nargs.rstrip(")") or 0) if nargs else 0
        row = conn.execute(
            """
            select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
             where (format('%%I.%%I', n.nspname, p.proname) = %s or p.proname = %s)
               and p.pronargs = %s
            """,
            (name.strip(), name.strip(), count),
        ).fetchone()
        return bool(row[0])

    def relkind_exists(name: str, kinds: list[str]) -> bool:
        # A bare name in a header is public's, as in the script (not the pinned path's).
        row = conn.execute(
            "select exists (select 1 from pg_class where oid = to_regclass(%s)"
            " and relkind = any(%s))",
            (qualify_public(name), kinds),
        ).fetchone()
        return bool(row[0])

    return NodeObjects(
        local_table=lambda n: n in local_tables,
        local_sequence=lambda n: n in local_seqs,
        local_destination=lambda n: (
            n in local_tables and relkind_exists(local_names.get(n, n), ["r", "p"])
        ),
        need_table=lambda n: relkind_exists(n, ["r", "p"]),
        need_sequence=lambda n: relkind_exists(n, ["S"]),
        need_function=function_exists,
        need_view=lambda n: relkind_exists(n, ["v", "m"]),
        need_schema=lambda n: exists(
            "select exists (select 1 from pg_namespace where nspname = %s)", n
        ),
    )
