"""Install and upgrade pgferry's SQL schemas in place.

SQL lives in versioned files ``sql/<component>/NNN_<what>.sql``.  The database records the
highest version applied per component in ``ferry_queue.schema_version``; installing runs
every newer file, in order, in ONE transaction, so a failure leaves nothing half-installed
and re-running is a no-op.  Files must therefore only ever be added, never edited once
released (a new file carries each change).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources

import psycopg

log = logging.getLogger(__name__)

# Install order matters: later components reference earlier ones.
COMPONENTS = ("queue", "node", "ferry")
SCHEMA_FOR = {"queue": "ferry_queue", "node": "ferry_node", "ferry": "ferry"}
_FILE_RE = re.compile(r"^(\d{3})_[\w-]+\.sql$")
# Any constant works; it only serialises concurrent installers.
_INSTALL_LOCK_KEY = 0x7067_6665


@dataclass(frozen=True)
class Migration:
    component: str
    version: int
    name: str

    def text(self) -> str:
        return (
            resources.files("pgferry")
            .joinpath("sql", self.component, self.name)
            .read_text(encoding="utf-8")
        )


def migrations(component: str) -> list[Migration]:
    folder = resources.files("pgferry").joinpath("sql", component)
    found = []
    for entry in folder.iterdir():
        match = _FILE_RE.match(entry.name)
        if match:
            found.append(Migration(component, int(match.group(1)), entry.name))
    return sorted(found, key=lambda m: m.version)


def latest_version(component: str) -> int:
    found = migrations(component)
    return found[-1].version if found else 0


def installed_versions(conn: psycopg.Connection) -> dict[str, int]:
    """Versions recorded in the database; empty when nothing is installed."""
    exists = conn.execute("select to_regclass('ferry_queue.schema_version') is not null").fetchone()
    if not exists or not exists[0]:
        return {}
    rows = conn.execute("select component, version from ferry_queue.schema_version").fetchall()
    return {component: version for component, version in rows}


def install(conn: psycopg.Connection, components: tuple[str, ...] = ("queue",)) -> list[str]:
    """Bring ``components`` (and those they depend on) up to date.

    Runs in the caller's transaction when one is open, otherwise in its own; returns a
    description of each file applied.  Requires a non-autocommit connection.
    """
    wanted = [
        c for c in COMPONENTS if COMPONENTS.index(c) <= max(map(COMPONENTS.index, components))
    ]
    applied: list[str] = []
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (_INSTALL_LOCK_KEY,))
        conn.execute("create schema if not exists ferry_queue")
        conn.execute(
            """
            create table if not exists ferry_queue.schema_version (
                component   text primary key,
                version     integer not null,
                installed_at timestamptz not null default now()
            )
            """
        )
        current = installed_versions(conn)
        for component in wanted:
            have = current.get(component, 0)
            for migration in migrations(component):
                if migration.version <= have:
                    continue
                log.info("Installing %s/%s", component, migration.name)
                conn.execute(migration.text())  # type: ignore[arg-type]
                applied.append(f"{component}/{migration.name}")
                have = migration.version
            conn.execute(
                """
                insert into ferry_queue.schema_version (component, version) values (%s, %s)
                on conflict (component) do update
                    set version = excluded.version, installed_at = now()
                """,
                (component, have),
            )
    return applied
