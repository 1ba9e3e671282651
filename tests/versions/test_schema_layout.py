"""Every released schema version upgrades to exactly what a fresh install builds.

The old chain is the SQL as it was last released before tables and functions were split
(one chain of versions, each function re-created in the version that changed it), read from
the repository's history at that release (``OLD_CHAIN_RELEASE``).  For every version N of
every component, a database is built by that chain up to N (the components it requires at
their last old version), upgraded by ``schema.install`` and dumped with ``pg_dump
--schema-only`` (function bodies, triggers, defaults, indexes and all); the dump must equal
a fresh install's, line for line.  One extra case starts every component at its first
version.  Databases are cloned from templates, so a case costs one ``create database``, the
old chain's tail and two dumps.
"""

from __future__ import annotations

import functools
import io
import itertools
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgferry import schema
from pgferry.db import connect
from pgferry.testing.cluster import LocalCluster

# The last release whose SQL was one chain of versions (sql/<component>/NNN_*.sql).
OLD_CHAIN_RELEASE = "ca04e2a71ac5a08a820dc8006a0f6612adec6bc0"
_REPOSITORY = Path(__file__).resolve().parents[2]
_names = itertools.count(1)


def history_missing(repository: Path = _REPOSITORY) -> str | None:
    """Why the old chain's release cannot be read from ``repository``, or None when it can
    (a shallow clone, or a tree without git, lacks it)."""
    found = subprocess.run(
        ["git", "-C", str(repository), "cat-file", "-e", f"{OLD_CHAIN_RELEASE}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode == 0:
        return None
    shallow = subprocess.run(
        ["git", "-C", str(repository), "rev-parse", "--is-shallow-repository"],
        capture_output=True,
        text=True,
        check=False,
    )
    how = (
        "this is a shallow clone (git fetch --unshallow)"
        if shallow.stdout.strip() == "true"
        else "it is not in this tree's git history"
    )
    return f"the upgrade proof needs release {OLD_CHAIN_RELEASE[:12]} of the SQL: {how}"


try:
    _MISSING = history_missing()
except FileNotFoundError:  # no git program
    _MISSING = "the upgrade proof reads the SQL's old release with git, which is not installed"
if _MISSING is not None:
    pytest.skip(_MISSING, allow_module_level=True)


@functools.cache
def old_chain() -> Path:
    """The release's ``sql/`` folder, taken out of the repository's history once per run."""
    folder = Path(tempfile.mkdtemp(prefix="pgferry-old-chain-"))
    archive = subprocess.run(
        ["git", "-C", str(_REPOSITORY), "archive", OLD_CHAIN_RELEASE, "src/pgferry/sql"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise RuntimeError(
            f"the old chain needs the repository's history ({OLD_CHAIN_RELEASE[:12]}): "
            + archive.stderr.decode(errors="replace").strip()
        )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder / "src" / "pgferry" / "sql"


def old_versions(component: str) -> dict[int, list[Path]]:
    """The old chain of a component: its files by version, oldest first."""
    found: dict[int, list[Path]] = {}
    for path in sorted((old_chain() / component).glob("*.sql")):
        found.setdefault(int(path.name[:3]), []).append(path)
    return dict(sorted(found.items()))


def install_old(conn: psycopg.Connection, upto: dict[str, int]) -> None:
    """Install components with the old chain up to the given versions, as its installer did."""
    conn.execute("create schema if not exists ferry_queue")
    conn.execute(
        "create table if not exists ferry_queue.schema_version (component text primary key,"
        " version integer not null, installed_at timestamptz not null default now())"
    )
    for component, version in upto.items():
        for number, paths in old_versions(component).items():
            if number <= version:
                for path in paths:
                    conn.execute(path.read_text())  # type: ignore[arg-type]
        conn.execute(
            "insert into ferry_queue.schema_version (component, version) values (%s, %s)",
            (component, version),
        )


def cases() -> Iterator[tuple[str, dict[str, int]]]:
    """(case id, version per component) for every old version of every node component."""
    latest = {c: max(old_versions(c)) for c in schema.COMPONENTS}
    for name in schema.COMPONENTS:
        required = schema.install_order((name,))
        for version in old_versions(name):
            upto = {c: latest[c] for c in required}
            upto[name] = version
            yield f"{name}-{version}", upto
    yield "all-first", {c: min(old_versions(c)) for c in schema.COMPONENTS}


class Databases:
    """Databases of one cluster: templates built once, clones and their dumps."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.fresh: dict[tuple[str, ...], list[str]] = {}

    def create(self, template: str | None = None) -> str:
        name = f"layout_{next(_names)}"
        with psycopg.connect(self.cluster.connstr(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("create database {} template {}").format(
                    sql.Identifier(name), sql.Identifier(template or "template0")
                )
            )
        return name

    def dump(self, dbname: str) -> list[str]:
        """The schema-only dump of pgferry's schemas, without the header lines."""
        proc = subprocess.run(
            [str(self.cluster.bindir / "pg_dump"), "--schema-only", "--no-owner",
             "-h", "127.0.0.1", "-p", str(self.cluster.port), "-U", "postgres",
             "-n", "ferry*", dbname],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        # \restrict / \unrestrict carry a random key in newer pg_dump releases.
        incidental = re.compile(r"^(-- Dumped (from|by) |\\(un)?restrict )")
        return [line for line in proc.stdout.splitlines() if not incidental.match(line)]

    def fresh_dump(self, components: tuple[str, ...]) -> list[str]:
        if components not in self.fresh:
            dbname = self.create()
            with connect(self.cluster.connstr(dbname)) as conn:
                schema.install(conn, components)
            self.fresh[components] = self.dump(dbname)
        return self.fresh[components]


@pytest.fixture(scope="module")
def databases(pg_a: LocalCluster) -> Databases:
    return Databases(pg_a)


@pytest.mark.parametrize(("upto"), [upto for _, upto in cases()], ids=[i for i, _ in cases()])
def test_an_old_version_upgrades_to_a_fresh_install(
    databases: Databases, upto: dict[str, int]
) -> None:
    dbname = databases.create()
    connstr = databases.cluster.connstr(dbname)
    with psycopg.connect(connstr) as conn:
        install_old(conn, upto)
    components = tuple(upto)
    with connect(connstr) as conn:
        applied = schema.install(conn, components)
        versions = schema.installed_versions(conn)
        again = schema.install(conn, components)
    assert versions == {c: schema.latest_version(c) for c in components}
    assert any("/functions/" in item for item in applied)
    assert again == []
    upgraded = databases.dump(dbname)
    fresh = databases.fresh_dump(components)
    assert any(line.startswith("CREATE FUNCTION") for line in fresh)
    assert upgraded == fresh


# Functions edited in place since the chain was frozen, each without a change of what it
# does (the queue and node tests say so), and the functions added for them: on a database
# of the old chain's last versions they change with the next install, like any edited
# function file.  Nothing else may differ.
EDITED_SINCE_THE_CHAIN = {
    # one lookup that raises instead of a copy of it in each function
    "ferry_queue": {
        "require_row(anyelement, text)",
        "lock_queue(text, boolean)",
        "find_batch(bigint)",
        "own_ticks(ferry_queue.queue)",
        "make_tick(text, pg_snapshot)",
        "ticker_step(text)",
        "ticker(text, bigint, timestamp with time zone, bigint)",
        "maint_rotate_tables_step1(text)",
        "cut_after(text, bigint)",
        "drop_queue(text, boolean)",
        "event_retry(bigint, bigint, timestamp with time zone)",
        "batch_event_sql(bigint, boolean)",
        # the event query's one text, with the range inlined or as parameters
        "tick_range_sql(integer, integer, bigint, bigint, boolean)",
        # next_batch_custom and next_batch_upto: one function opens the batch (and one
        # chooses its tick: batch_tick)
        "open_next_batch(text, text, interval, integer, interval, bigint)",
        "next_batch_custom(text, text, interval, integer, interval)",
        "next_batch_upto(text, text, bigint, integer)",
        # the plain capture function is the templated one without a template
        "capture_function(integer, text[])",
        "templated_capture_function(integer, text[], text)",
        "capture_image_eq(text[])",
        "capture_template(regclass, jsonb)",
        # a queue ticks at once for events when one of its consumers waits
        "tick_due(ferry_queue.queue)",
        # capture functions open with the sleeping ticker's wake-up
        "install_capture_function(integer, text, text)",
        # the queue is a trust boundary: capture with its owner's rights, pinned search_path
        "insert_event(text, text, text, text, text, text, text)",
        "capture_insert(text, text, text, text[], text, text)",
        "capture_image(text, text[])",
        "plain_capture_template(text[])",
        "capture_truncate()",
        "deny_write()",
        "attach_capture(text, regclass, boolean)",
        "attach_capture_spec(text, regclass, jsonb)",
        "plain_capture(jsonb)",
        "refresh_capture_functions(integer)",
        "prune_capture_functions(integer)",
        # inlined into the ticker's round: its one call schema-qualified
        "seq_position(regclass)",
        # capture by statement: three statement triggers beside the truncate one
        "drop_capture_triggers(text, regclass)",
    },
    "ferry_node": {
        "find_node(text)",
        "local_watermark(text)",
        "global_watermark(text)",
    },
}


_PINNED_PATH = re.compile(r"^[ \t]*SET search_path TO 'pg_catalog', 'pg_temp'\n", re.MULTILINE)


def dump_objects(lines: list[str]) -> dict[tuple[str, str, str], str]:
    """A dump's objects by (schema, type, name) from its "-- Name: ...; Type: ...;" headers."""
    objects: dict[tuple[str, str, str], str] = {}
    key = ("", "", "preamble")
    for line in lines:
        if line.startswith("SET "):
            continue  # session settings, emitted before whichever object comes first
        match = re.match(r"^-- Name: (.*); Type: ([^;]*); Schema: ([^;]*);", line)
        if match:
            key = (match.group(3), match.group(2), match.group(1))
        objects[key] = objects.get(key, "") + line + "\n"
    # Each block without the blank and "--" lines that open the next one.
    return {key: re.sub(r"[\s-]*$", "", text) for key, text in objects.items()}


@pytest.mark.parametrize("components", [("queue",), ("node",), ("ferry",)])
def test_the_old_chain_built_what_a_fresh_install_builds(
    databases: Databases, components: tuple[str, ...]
) -> None:
    """The function files hold the old chain's last text of each of its functions, but for
    the listed edits.  (Its tables are those of an upgrade from its last versions, above.)"""
    dbname = databases.create()
    with psycopg.connect(databases.cluster.connstr(dbname)) as conn:
        install_old(conn, {c: max(old_versions(c)) for c in schema.install_order(components)})
        conn.execute("alter table ferry_queue.schema_version add column functions_digest text")
    old = dump_objects(databases.dump(dbname))
    fresh = dump_objects(databases.fresh_dump(components))
    functions = {key for key in old if key[1] == "FUNCTION"}
    assert len(functions) > 5

    def text(objects: dict[tuple[str, str, str], str], key: tuple[str, str, str]) -> str:
        # Every function has since pinned its search_path: not an edit of its body.
        return _PINNED_PATH.sub("", objects.get(key, ""))

    differ = {
        (ns, name)
        for ns, _, name in functions
        if text(old, (ns, _, name)) != text(fresh, (ns, _, name))
    }
    edited = {(ns, name) for ns, names in EDITED_SINCE_THE_CHAIN.items() for name in names}
    assert differ <= edited


def test_the_old_chain_is_the_released_versions() -> None:
    """The layout keeps every version number of the old chain; new ones come after it."""
    for name in (*schema.COMPONENTS, "copy"):
        old = list(old_versions(name))
        new = [m.version for m in schema.migrations(name)]
        assert new[: len(old)] == old, name
        assert all(version > old[-1] for version in new[len(old) :]), name


def test_copy_upgrades_to_a_fresh_install(databases: Databases) -> None:
    old = databases.create()
    with psycopg.connect(databases.cluster.connstr(old)) as conn:
        conn.execute("create schema ferry_copy")
        conn.execute(
            "create table ferry_copy.schema_version (component text primary key,"
            " version integer not null, installed_at timestamptz not null default now())"
        )
        for path in old_versions("copy")[1]:
            conn.execute(path.read_text())  # type: ignore[arg-type]
        conn.execute("insert into ferry_copy.schema_version values ('copy', 1)")
    newer = [
        f"copy/tables/{name}"
        for migration in schema.migrations("copy")
        if migration.version > max(old_versions("copy"))
        for name in migration.files
    ]
    with connect(databases.cluster.connstr(old)) as conn:
        # only the versions released after the old chain run
        assert schema.install(conn, ("copy",)) == newer
    assert databases.dump(old) == databases.fresh_dump(("copy",))


def test_function_files_are_valid_in_any_order(
    databases: Databases, new_db_a: Callable[[str | None], str]
) -> None:
    """Installs apply the function files with bodies unchecked; checked here, after all
    exist, every file still runs (a body naming a missing object or column fails)."""
    connstr = new_db_a(None)
    with connect(connstr) as conn:
        schema.install(conn, ("ferry",))
    with psycopg.connect(connstr) as conn:
        conn.execute("set check_function_bodies = on")
        for name in schema.COMPONENTS:
            for _, text in schema.functions(name):
                conn.execute(text)  # type: ignore[arg-type]


def test_capture_triggers_made_before_queue_version_9_keep_working(
    new_db_a: Callable[[str | None], str],
) -> None:
    """Version 9 rewrites the capture functions' bookkeeping: a trigger attached before it
    still queues, also after the next rotation."""
    connstr = new_db_a(None)
    with psycopg.connect(connstr) as conn:
        install_old(conn, {"queue": 8})
    with psycopg.connect(connstr, autocommit=True) as conn:
        conn.execute("select ferry_queue.create_queue('q')")
        conn.execute("select ferry_queue.set_queue_config('q', 'rotation_period', '0')")
        conn.execute("create table t (id int primary key)")
        conn.execute("select ferry_queue.attach_capture('q', 't')")
        conn.execute("insert into t values (1)")
        schema.install(conn, ("queue",))
        conn.execute("insert into t values (2)")
        conn.execute("select ferry_queue.maint_rotate_tables_step1('q')")
        conn.execute("insert into t values (3)")
        rows = conn.execute(
            "select ev_part % 10, ev_data from ferry_queue.event order by ev_id"
        ).fetchall()
    assert rows == [(0, '{"id":1}'), (0, '{"id":2}'), (1, '{"id":3}')]
