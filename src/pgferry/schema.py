"""Install and upgrade pgferry's SQL schemas in place.

SQL lives in versioned files under ``sql/<component>/``.  A version is either ONE file,
``NNN_<what>.sql``, or several parts, ``NNN_P_<what>.sql`` with P = 1, 2, ... (compared as
numbers), that together are that version: the parts run in ascending P, one after another,
exactly as one script made of them would.  Version 1 of the queue is split by job this way
(``001_1_tables.sql`` ... ``001_9_capture.sql``).  A version has either a single file or
only numbered parts, each part number once; anything else is refused.

Each component owns one schema and may require others, which are installed (and upgraded)
first: ``queue`` (ferry_queue) <- ``node`` (ferry_node) <- ``ferry`` (ferry).  ``copy``
(ferry_copy, the copy job's bookkeeping in a destination database) stands alone, so that a
database that only receives copies gets nothing else.  The database records the highest
version applied per component in a ``schema_version`` table: ``ferry_queue.schema_version``
for queue, node and ferry, ``ferry_copy.schema_version`` for copy.

Installing runs every newer version, in order, in ONE transaction, so a failure leaves
nothing half-installed and re-running is a no-op.  A database at version N needs nothing from
the files of versions <= N, so files must only ever be added, never edited once released (a
new version carries each change).  Splitting a released version into parts without changing
its statements or their order changes nothing for any database.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

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
SCHEMA_FOR = {c.name: c.schema for c in _REGISTRY.values()}
# NNN_<what>.sql (a whole version) or NNN_P_<what>.sql (part P of version NNN).
_FILE_RE = re.compile(r"^(\d{3})(?:_(\d+))?_[\w-]+\.sql$")
# Any constant works; it only serialises concurrent installers.
_INSTALL_LOCK_KEY = 0x7067_6665


@dataclass(frozen=True)
class Migration:
    """One version of a component: its file, or its parts in the order they run."""

    component: str
    version: int
    files: tuple[str, ...]

    def read(self, name: str) -> str:
        return (
            resources.files("pgferry")
            .joinpath("sql", self.component, name)
            .read_text(encoding="utf-8")
        )

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


def migrations(component_name: str) -> list[Migration]:
    """The versions of a component, oldest first."""
    folder = resources.files("pgferry").joinpath("sql", component(component_name).name)
    return group_versions(component_name, [entry.name for entry in folder.iterdir()])


def group_versions(component_name: str, names: Iterable[str]) -> list[Migration]:
    """The versions that the file ``names`` of a component make, oldest first.

    Names that are not ``NNN_<what>.sql`` or ``NNN_P_<what>.sql`` are ignored.
    """
    by_version: dict[int, list[tuple[int | None, str]]] = {}
    for name in names:
        match = _FILE_RE.match(name)
        if match:
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


def latest_version(component_name: str) -> int:
    found = migrations(component_name)
    return found[-1].version if found else 0


def installed_versions(conn: psycopg.Connection) -> dict[str, int]:
    """Versions recorded in the database; empty when nothing is installed."""
    versions: dict[str, int] = {}
    for registry in dict.fromkeys(c.registry for c in _REGISTRY.values()):
        exists = conn.execute(
            "select to_regclass(%s) is not null", (f"{registry}.schema_version",)
        ).fetchone()
        if not exists or not exists[0]:
            continue
        names = [c.name for c in _REGISTRY.values() if c.registry == registry]
        rows = conn.execute(
            sql.SQL("select component, version from {} where component = any(%s)").format(
                sql.Identifier(registry, "schema_version")
            ),
            (names,),
        ).fetchall()
        versions.update({name: version for name, version in rows})
    return versions


def install(conn: psycopg.Connection, components: tuple[str, ...] = ("queue",)) -> list[str]:
    """Bring ``components`` (and those they require) up to date.

    ``install(conn, ("ferry",))`` installs a node database (queue, node, ferry);
    ``install(conn, ("copy",))`` only ferry_copy.  Runs in the caller's transaction when one
    is open, otherwise in its own (on an autocommit connection too); returns a description
    of each file applied, in the order applied.
    """
    order = install_order(components)
    applied: list[str] = []
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (_INSTALL_LOCK_KEY,))
        for registry in dict.fromkeys(component(name).registry for name in order):
            conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(registry)))
            conn.execute(
                sql.SQL(
                    """
                    create table if not exists {} (
                        component   text primary key,
                        version     integer not null,
                        installed_at timestamptz not null default now()
                    )
                    """
                ).format(sql.Identifier(registry, "schema_version"))
            )
        current = installed_versions(conn)
        for name in order:
            have = current.get(name, 0)
            for migration in migrations(name):
                if migration.version <= have:
                    continue
                for file_name, text in migration.scripts():
                    log.info("Installing %s/%s", name, file_name)
                    conn.execute(text)  # type: ignore[arg-type]
                    applied.append(f"{name}/{file_name}")
                have = migration.version
            if current.get(name) != have:
                conn.execute(
                    sql.SQL(
                        """
                        insert into {} (component, version) values (%s, %s)
                        on conflict (component) do update
                            set version = excluded.version, installed_at = now()
                        """
                    ).format(sql.Identifier(component(name).registry, "schema_version")),
                    (name, have),
                )
    return applied
