"""Install and upgrade pgferry's SQL schemas in place.

The rule: what holds data is versioned, code is current.  Per component, ``sql/<component>/``
holds two folders.  ``tables/NNN_<what>.sql`` are the versions: tables, types, sequences,
indexes, their changes and data moves, and the DROP of a function that a version removes or
renames (or whose signature or result type it changes).  A version is never edited once
released; a database at version N gets the versions above N.  ``functions/<schema>.<name>.sql``
holds the current text of one function (with its overloads), trigger function (with the
trigger on pgferry's own table that calls it) or view, written to be run again and again
(``CREATE OR REPLACE``), and edited in place.  Every install and upgrade re-applies all of a
component's function files after its table versions, in file-name order, with
``check_function_bodies`` off, so that no file depends on the order of any other (as in a
``pg_dump``); a change to functions alone needs no new version.

A version is either ONE file, ``NNN_<what>.sql``, or several parts, ``NNN_P_<what>.sql``
with P = 1, 2, ... (compared as numbers), run in ascending P as one script made of them
would be.  A version has either a single file or only numbered parts, each part number
once; an SQL file anywhere else in the component's folder, or a function file that is not
``<schema>.<name>.sql`` of the component's schema or that says ``CREATE FUNCTION`` without
``OR REPLACE``, is refused before anything runs.

Each component owns one schema and may require others, which are installed (and upgraded)
first: ``queue`` (ferry_queue) <- ``node`` (ferry_node) <- ``ferry`` (ferry).  ``copy``
(ferry_copy, the copy job's bookkeeping in a destination database) stands alone, so that a
database that only receives copies gets nothing else.  The database records per component
the highest version applied and a digest of the function files applied, in a
``schema_version`` table: ``ferry_queue.schema_version`` for queue, node and ferry,
``ferry_copy.schema_version`` for copy.

After its function files, a component's functions are closed to PUBLIC (EXECUTE revoked
from every function of its schema: PostgreSQL grants it to PUBLIC on each CREATE), so that
only their owner, the role that installs pgferry, and roles it grants EXECUTE to may call
them; and the queue's generated capture functions are rewritten, so that a database
upgraded from a version whose capture ran with the writer's rights gets today's at once
(docs/security.md).  A fresh install and an upgrade end with the same privileges.

Every install of the queue also makes the plain row capture in C,
``ferry_queue.plain_row_capture()``, when it is missing and can be made: the installing role
is a superuser and the server has the library ``pgferry_capture`` (``make capture-c``).
Otherwise nothing changes and plain capture runs in PL/pgSQL (docs/events.md).

Installing runs in ONE transaction under an advisory lock, so a failure leaves nothing
half-installed.  The function files of a component are re-applied when a version ran or when
their digest differs from the recorded one; otherwise a re-run changes nothing and applies
nothing.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Component:
    name: str
    schema: str  # the schema its files create
    requires: tuple[str, ...] = ()  # components installed (and upgraded) before it
    registry: str = "ferry_queue"  # the schema whose schema_version records its version


_REGISTRY = {
    c.name: c
    for c in (
        Component("queue", "ferry_queue"),
        Component("node", "ferry_node", requires=("queue",)),
        Component("ferry", "ferry", requires=("node",)),
        Component("copy", "ferry_copy", registry="ferry_copy"),
    )
}
# The components of a node database, in install order.
COMPONENTS = ("queue", "node", "ferry")
TABLES, FUNCTIONS = "tables", "functions"
# NNN_<what>.sql (a whole version) or NNN_P_<what>.sql (part P of version NNN).
_FILE_RE = re.compile(r"^(\d{3})(?:_(\d+))?_[\w-]+\.sql$")
_FUNCTION_FILE_RE = re.compile(r"^(\w+)\.(\w+)\.sql$")
# A definition that a second run would refuse ("already exists").
_NOT_REPEATABLE_RE = re.compile(r"\bcreate\s+(function|procedure|view)\b", re.IGNORECASE)
# Any constant works; it only serialises concurrent installers.
_INSTALL_LOCK_KEY = 0x7067_6665


@dataclass(frozen=True)
class Migration:
    """One version of a component: its file, or its parts in the order they run."""

    component: str
    version: int
    files: tuple[str, ...]

    def read(self, name: str) -> str:
        return _folder(self.component, TABLES).joinpath(name).read_text(encoding="utf-8")

    def scripts(self) -> list[tuple[str, str]]:
        """(file name, SQL text) of each file, in the order they run."""
        return [(name, self.read(name)) for name in self.files]


def component(name: str) -> Component:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown schema component: {name}") from None


def install_order(components: tuple[str, ...]) -> list[str]:
    """``components`` and every component they require, each after its requirements."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for required in component(name).requires:
            visit(required)
        order.append(name)

    for name in components:
        visit(name)
    return order


def _folder(component_name: str, *sub: str) -> Traversable:
    return resources.files("pgferry").joinpath("sql", component(component_name).name, *sub)


def _sql_names(folder: Traversable) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(e.name for e in folder.iterdir() if e.is_file() and e.name.endswith(".sql"))


def check_layout(component_name: str) -> None:
    """Refuse SQL files outside ``tables/`` and ``functions/`` of the component."""
    stray = _sql_names(_folder(component_name))
    if stray:
        raise ValueError(
            f"sql/{component_name}/{stray[0]}: SQL files belong in sql/{component_name}/tables/"
            f" (NNN_<what>.sql, versions) or sql/{component_name}/functions/"
            " (<schema>.<name>.sql, current code)"
        )


def migrations(component_name: str) -> list[Migration]:
    """The versions of a component, oldest first."""
    check_layout(component_name)
    return group_versions(component_name, _sql_names(_folder(component_name, TABLES)))


def group_versions(component_name: str, names: Iterable[str]) -> list[Migration]:
    """The versions that the file ``names`` of a component's ``tables/`` make, oldest first.

    A name that is not ``NNN_<what>.sql`` or ``NNN_P_<what>.sql`` is refused.
    """
    by_version: dict[int, list[tuple[int | None, str]]] = {}
    for name in names:
        match = _FILE_RE.match(name)
        if not match:
            raise ValueError(
                f"sql/{component_name}/{TABLES}/{name}: a version is NNN_<what>.sql"
                " or NNN_P_<what>.sql"
            )
        part = int(match.group(2)) if match.group(2) is not None else None
        by_version.setdefault(int(match.group(1)), []).append((part, name))
    found = []
    for version, entries in sorted(by_version.items()):
        parts = [part for part, _ in entries]
        if len(entries) > 1 and (None in parts or len(set(parts)) != len(parts)):
            listed = ", ".join(sorted(file_name for _, file_name in entries))
            raise ValueError(
                f"sql/{component_name}: version {version} must be one file or numbered parts"
                f" NNN_P_<what>.sql with distinct P, found: {listed}"
            )
        ordered = tuple(file_name for _, file_name in sorted(entries, key=lambda e: e[0] or 0))
        found.append(Migration(component_name, version, ordered))
    return found


def functions(component_name: str) -> list[tuple[str, str]]:
    """(file name, SQL text) of a component's function files, in the order they run."""
    check_layout(component_name)
    folder = _folder(component_name, FUNCTIONS)
    schema = component(component_name).schema
    found = []
    for name in _sql_names(folder):
        match = _FUNCTION_FILE_RE.match(name)
        if not match or match.group(1) != schema:
            raise ValueError(
                f"sql/{component_name}/{FUNCTIONS}/{name}: a function file is {schema}.<name>.sql"
            )
        text = folder.joinpath(name).read_text(encoding="utf-8")
        if _NOT_REPEATABLE_RE.search(_without_comments(text)):
            raise ValueError(
                f"sql/{component_name}/{FUNCTIONS}/{name}: definitions are re-applied by every"
                " upgrade: write CREATE OR REPLACE"
            )
        found.append((name, text))
    return found


def _without_comments(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


def functions_digest(component_name: str) -> str:
    """What identifies the function files of a component as they are now."""
    digest = hashlib.sha256()
    for name, text in functions(component_name):
        digest.update(f"{name}\0{text}\0".encode())
    return digest.hexdigest()


def latest_version(component_name: str) -> int:
    found = migrations(component_name)
    return found[-1].version if found else 0


def _registry_table(conn: psycopg.Connection, registry: str) -> bool:
    row = conn.execute(
        "select to_regclass(%s) is not null", (f"{registry}.schema_version",)
    ).fetchone()
    return bool(row and row[0])


def installed_versions(conn: psycopg.Connection) -> dict[str, int]:
    """Versions recorded in the database; empty when nothing is installed."""
    return {name: version for name, (version, _) in _installed(conn).items()}


def _installed(conn: psycopg.Connection) -> dict[str, tuple[int, str | None]]:
    """(version, functions digest) recorded per component."""
    found: dict[str, tuple[int, str | None]] = {}
    for registry in dict.fromkeys(c.registry for c in _REGISTRY.values()):
        if not _registry_table(conn, registry):
            continue
        table = sql.Identifier(registry, "schema_version")
        has_digest = _installed_digest_column(conn, registry)
        digest = sql.SQL("functions_digest" if has_digest else "null::text")
        names = [c.name for c in _REGISTRY.values() if c.registry == registry]
        rows = conn.execute(
            sql.SQL("select component, version, {} from {} where component = any(%s)").format(
                digest, table
            ),
            (names,),
        ).fetchall()
        found.update({name: (version, digest) for name, version, digest in rows})
    return found


def _prepare_registry(conn: psycopg.Connection, registry: str) -> None:
    """The schema_version table of ``registry``, with its functions_digest column."""
    # Looked up first: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when
    # the schema is there, which a role that only uses an installed schema lacks.
    found = conn.execute(
        "select 1 from pg_catalog.pg_namespace where nspname = %s", (registry,)
    ).fetchone()
    if not found:
        conn.execute(sql.SQL("create schema {}").format(sql.Identifier(registry)))
    table = sql.Identifier(registry, "schema_version")
    if not _registry_table(conn, registry):
        conn.execute(
            sql.SQL(
                """
                create table {} (
                    component        text primary key,
                    version          integer not null,
                    installed_at     timestamptz not null default now(),
                    functions_digest text
                )
                """
            ).format(table)
        )
    elif not _installed_digest_column(conn, registry):
        # Recorded by an installer from before function files: the next run applies them.
        conn.execute(sql.SQL("alter table {} add column functions_digest text").format(table))


def _installed_digest_column(conn: psycopg.Connection, registry: str) -> bool:
    row = conn.execute(
        "select exists (select 1 from pg_attribute where attrelid = %s::regclass"
        " and attname = 'functions_digest' and not attisdropped)",
        (f"{registry}.schema_version",),
    ).fetchone()
    return bool(row and row[0])


def _apply_functions(conn: psycopg.Connection, name: str) -> list[str]:
    """Run every function file of component ``name``; the files applied."""
    files = functions(name)
    if not files:
        return []
    row = conn.execute("select current_setting('check_function_bodies')").fetchone()
    before = row[0] if row else "on"
    # A body may name a function of a file that runs later: checked when called, not now.
    conn.execute("select set_config('check_function_bodies', 'off', true)")
    for file_name, text in files:
        log.debug("Applying %s/%s/%s", name, FUNCTIONS, file_name)
        conn.execute(text)  # type: ignore[arg-type]
    conn.execute("select set_config('check_function_bodies', %s, true)", (before,))
    return [file_name for file_name, _ in files]


def _close_functions(conn: psycopg.Connection, name: str) -> None:
    """EXECUTE on every function of component ``name``'s schema for its owner alone; for the
    queue, its capture functions rewritten as the current function files make them."""
    schema = component(name).schema
    conn.execute(
        sql.SQL("revoke all on all routines in schema {} from public").format(
            sql.Identifier(schema)
        )
    )
    if name == "queue":
        conn.execute(
            "select ferry_queue.refresh_capture_functions(queue_id) from ferry_queue.queue"
            " order by queue_id"
        )


def _install_row_capture(conn: psycopg.Connection) -> None:
    """The C function of plain row capture, where it can be made; never fails."""
    row = conn.execute("select ferry_queue.install_row_capture()").fetchone()
    log.debug("Plain row capture: %s", row[0] if row else "?")


def install(conn: psycopg.Connection, components: tuple[str, ...] = ("queue",)) -> list[str]:
    """Bring ``components`` (and those they require) up to date.

    ``install(conn, ("ferry",))`` installs a node database (queue, node, ferry);
    ``install(conn, ("copy",))`` only ferry_copy.  Runs in the caller's transaction when one
    is open, otherwise in its own (on an autocommit connection too); returns a description
    of what was applied, in order: each version's file, then ``<component>/functions/ (N
    files)`` when the function files were applied.
    """
    order = install_order(components)
    for name in order:  # a malformed layout is refused before anything runs
        migrations(name)
        functions(name)
    applied: list[str] = []
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (_INSTALL_LOCK_KEY,))
        for registry in dict.fromkeys(component(name).registry for name in order):
            _prepare_registry(conn, registry)
        current = _installed(conn)
        for name in order:
            had, had_digest = current.get(name, (0, None))
            have = had
            for migration in migrations(name):
                if migration.version <= have:
                    continue
                for file_name, text in migration.scripts():
                    log.info("Installing %s/%s/%s", name, TABLES, file_name)
                    conn.execute(text)  # type: ignore[arg-type]
                    applied.append(f"{name}/{TABLES}/{file_name}")
                have = migration.version
            digest = functions_digest(name)
            if have != had or digest != had_digest:
                files = _apply_functions(conn, name)
                _close_functions(conn, name)
                if files:
                    log.info("Applied %s/%s/ (%d files)", name, FUNCTIONS, len(files))
                    applied.append(f"{name}/{FUNCTIONS}/ ({len(files)} files)")
            if name == "queue":
                _install_row_capture(conn)
            if name not in current or (have, digest) != current[name]:
                conn.execute(
                    sql.SQL(
                        """
                        insert into {} (component, version, functions_digest)
                        values (%s, %s, %s)
                        on conflict (component) do update
                            set version = excluded.version,
                                functions_digest = excluded.functions_digest,
                                installed_at = now()
                        """
                    ).format(sql.Identifier(component(name).registry, "schema_version")),
                    (name, have, digest),
                )
    return applied
