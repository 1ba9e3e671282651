"""Each schema pgferry installs is read and written through one package
(docs/architecture.md, "One access layer per schema"): ``ferry_queue`` through ``queue/``,
``ferry_node`` through ``node/``, ``ferry`` through ``registry/``, ``ferry_copy`` (a copy's
bookkeeping in its destination) through ``pipeline/copy/``.  A table of ``ferry`` that
belongs to one feature may also be used by that feature's module (``FEATURES``).  No other
module holds SQL naming a table, sequence or function of a schema, written out or composed
with ``sql.Identifier(schema, ...)``, except the few ``ALLOWED`` (each says why).  And the
registry is the only writer of ``ferry.table_info`` and ``ferry.seq_info``.

The objects of each schema are read from the SQL files that create them (``sql/``, not
scanned themselves).  Every string literal of every module is read through its syntax tree,
so implicit concatenation and f-strings count; comments and docstrings do not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import pgferry

pytestmark = pytest.mark.pure

PACKAGE = Path(pgferry.__file__).parent
REGISTRY = PACKAGE / "registry"
TABLES = ("table_info", "seq_info")

_WRITE = r"(?:insert\s+into|update|delete\s+from)\s+"
# ferry.table_info, "ferry"."table_info", ferry."seq_info", ...
_WRITTEN_OUT = re.compile(
    _WRITE + r'"?ferry"?\s*\.\s*"?(?:' + "|".join(TABLES) + r')"?\b', re.IGNORECASE
)
# A statement writing to a placeholder, filled by .format(...)
_WRITE_PLACEHOLDER = re.compile(_WRITE + r"(?:only\s+)?\{", re.IGNORECASE)


def _text(node: ast.AST) -> str | None:
    """The literal text of a string constant or an f-string (its constant parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _names_registry_table(node: ast.AST) -> bool:
    """``Identifier("ferry", "table_info")`` (or seq_info) anywhere below ``node``."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        func = sub.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        args = [_text(a) for a in sub.args]
        if name == "Identifier" and len(args) == 2 and args[0] == "ferry" and args[1] in TABLES:
            return True
    return False


def writes(source: str) -> list[int]:
    """Line numbers of SQL in ``source`` that writes to the registry's tables."""
    found: set[int] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        text = _text(node)
        if text is not None and _WRITTEN_OUT.search(text):
            found.add(node.lineno)
        # sql.SQL("update {} set ...").format(sql.Identifier("ferry", "table_info"), ...)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
        ):
            template = node.func.value
            inner = template.args[0] if isinstance(template, ast.Call) and template.args else None
            text = _text(inner) if inner is not None else _text(template)
            if text and _WRITE_PLACEHOLDER.search(text):
                filled = [*node.args, *(k.value for k in node.keywords)]
                if any(_names_registry_table(a) for a in filled):
                    found.add(node.lineno)
    return sorted(found)


SQL = PACKAGE / "sql"
# schema -> the package that reads and writes it (a path below src/pgferry).
OWNERS = {
    "ferry_queue": "queue/",
    "ferry_node": "node/",
    "ferry": "registry/",
    "ferry_copy": "pipeline/copy/",
}
# Tables and functions of ``ferry`` that belong to one feature: its module uses them too.
FEATURES = {
    "ferry.sync_request": "sync/",  # compare's sync points: filed, then served by the worker
    "ferry.sync_tick": "sync/point.py",
    "ferry.applied_part": "apply/replay/two_connections.py",  # a batch's tables shared out
    "ferry.applied_execute": "scripts/execute.py",  # queued scripts run once
    "ferry.failed_event": "scripts/skip.py",  # skip-event
    "ferry.skipped_event": "scripts/skip.py",
    "ferry.ddl_capture": "scripts/ddl_capture.py",  # capture-ddl's switch and triggers
    "ferry.ddl_capture_drop": "scripts/ddl_capture.py",
    "ferry.ddl_capture_drop_start": "scripts/ddl_capture.py",
    "ferry.ddl_capture_drop_table": "scripts/ddl_capture.py",
    "ferry.ddl_capture_end": "scripts/ddl_capture.py",
    "ferry.ddl_isolate": "scripts/ddl_capture.py",
    "ferry.attach_deny": "node/capture.py",  # the deny triggers
    "ferry.local_missing": "node/tableops.py",  # the missing command
}
# Modules (or folders) allowed to name a schema outside its package, and why.
ALLOWED = {
    # The installer: every component's versions, and the capture functions it refreshes.
    ("schema.py", "ferry_queue"),
    # The harness checks a cascade from outside, as the tests do (tests/ are not scanned).
    ("testing/", "ferry"),
    ("testing/", "ferry_node"),
    ("testing/", "ferry_queue"),
    # A copy's progress and the keys a running copy dropped are one statement each with
    # the registry's rows; pipeline/ sits above registry/, which cannot call it.
    ("registry/entries.py", "ferry_copy"),
    ("registry/catalog.py", "ferry_copy"),
}


def schema_objects() -> dict[str, set[str]]:
    """schema -> the tables, sequences and functions pgferry's SQL files create in it."""
    found: dict[str, set[str]] = {schema: set() for schema in OWNERS}
    made = re.compile(
        r"create\s+(?:unlogged\s+)?(?:table|sequence)\s+(?:if\s+not\s+exists\s+)?(\w+)\.(\w+)",
        re.IGNORECASE,
    )
    for path in SQL.glob("*/tables/*.sql"):
        for schema, name in made.findall(path.read_text(encoding="utf-8")):
            if schema.lower() in found:
                found[schema.lower()].add(name.lower())
    for path in SQL.glob("*/functions/*.sql"):
        schema, name, _ = path.name.split(".")
        found[schema].add(name)
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


_NAMED = re.compile(r'"?\b(ferry(?:_queue|_node|_copy)?)"?\s*\.\s*"?(\w+)', re.IGNORECASE)
# A string is taken for SQL when it holds one of these words (a log line naming a table
# is not a read of it).
_SQL_WORD = re.compile(
    r"\b(?:select|insert|update|delete|from|join|into|truncate|call|regclass|lock|nextval)\b",
    re.IGNORECASE,
)


def named(source: str, objects: dict[str, set[str]]) -> set[tuple[str, str, int]]:
    """(schema, object, line) of every object of ``objects`` that ``source``'s SQL names:
    written out in a string, or as ``Identifier(schema, ...)`` (any object of the schema,
    since such names are often composed: a queue's event tables)."""
    found = set()
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        text = _text(node)
        if text is not None and id(node) not in skip and _SQL_WORD.search(text):
            for schema, name in _NAMED.findall(text):
                schema, name = schema.lower(), name.lower()
                if name in objects.get(schema, ()):
                    found.add((schema, name, node.lineno))
        if isinstance(node, ast.Call):
            func = node.func
            call = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            args = [_text(a) for a in node.args]
            if call == "Identifier" and len(args) >= 2 and args[0] in objects:
                found.add((str(args[0]), str(args[1] or "?"), node.lineno))
    return found


def _may_name(module: str, schema: str, name: str) -> bool:
    feature = FEATURES.get(f"{schema}.{name}", "")
    if module.startswith(OWNERS[schema]) or _within(module, feature):
        return True
    return any(module.startswith(place) and schema == s for place, s in ALLOWED)


def _within(module: str, feature: str) -> bool:
    """Whether ``module`` is the feature's module, or one of its package (a path ending
    in ``/``)."""
    return bool(feature) and (
        module == feature or (feature.endswith("/") and module.startswith(feature))
    )


def offenders() -> list[str]:
    objects = schema_objects()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for schema, name, line in sorted(named(path.read_text(encoding="utf-8"), objects)):
            if not _may_name(module, schema, name):
                found.append(f"{module}:{line} names {schema}.{name} (use {OWNERS[schema]})")
    return found


def test_the_objects_come_from_the_sql_files() -> None:
    objects = schema_objects()
    assert {"table_info", "seq_info", "sync_request", "seq_advance", "copy_group_seq"} <= (
        objects["ferry"]
    )
    assert {"node_info", "local_state", "applied_tick"} <= objects["ferry_node"]
    assert {"tick", "queue", "subscription", "get_queue_info"} <= objects["ferry_queue"]
    assert {"range_done", "chunk", "saved_index"} <= objects["ferry_copy"]
    # A feature's entry names a real object and module (a renamed one would leave its
    # entry behind).
    for key, module in FEATURES.items():
        schema, name = key.split(".")
        assert name in objects[schema], key
        assert (
            (PACKAGE / module).is_dir() if module.endswith("/") else (PACKAGE / module).is_file()
        ), module


def test_the_access_scanner_finds_every_spelling() -> None:
    objects = schema_objects()
    caught = [
        'conn.execute("select * from ferry.table_info")',
        'conn.execute(\'select 1 from "ferry_node"."node_info"\')',
        'conn.execute("select max(tick_id) from ferry_queue." "tick")',
        'conn.execute(f"select {x} from ferry_copy.range_done")',
        'conn.execute("select ferry_queue.get_queue_info()")',
        "conn.execute(\"select to_regclass('ferry_copy.range_done')\")",
        'sql.SQL("select * from {}").format(sql.Identifier("ferry_queue", name))',
        'X = """\n  select 1\n    from ferry_node.local_state s"""',
    ]
    for source in caught:
        assert named(source, objects), source
    passed = [
        '"""A module about ferry.table_info."""',
        'def f():\n    """Reads ferry_node.node_info."""',
        "# select * from ferry.table_info\nx = 1",
        'EVENT = "ferry.remove"',  # an event type, no object of the schema
        'log.warning("rows saved in ferry_node.lost_after_failover")',  # no SQL
        'conn.execute("select * from pg_catalog.pg_class")',
    ]
    for source in passed:
        assert not named(source, objects), source


def test_each_schema_is_used_through_its_package() -> None:
    found = offenders()
    assert not found, "SQL naming a schema outside its package: " + ", ".join(found)


def test_every_allowance_is_still_used() -> None:
    """An allowance whose module no longer names the schema is left over: remove it."""
    objects = schema_objects()
    used = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for schema, _name, _line in named(path.read_text(encoding="utf-8"), objects):
            used |= {(p, s) for p, s in ALLOWED if module.startswith(p) and s == schema}
    assert used == ALLOWED, f"allowances no longer used: {sorted(ALLOWED - used)}"


def test_scanner_finds_every_spelling() -> None:
    caught = [
        'conn.execute("update ferry.table_info set x = 1")',
        'conn.execute("""\n  insert into\n   ferry.seq_info (a) values (1)""")',
        'conn.execute(\'DELETE FROM "ferry"."table_info" where true\')',
        'conn.execute("update ferry." "seq_info set last_value = 1")',
        'conn.execute(f"update ferry.table_info set {col} = 1")',
        'sql.SQL("update {} set x = 1").format(sql.Identifier("ferry", "table_info"))',
        'sql.SQL("delete from {t}").format(t=Identifier("ferry", "seq_info"))',
    ]
    for source in caught:
        assert writes(source) != [], source
    passed = [
        'conn.execute("select * from ferry.table_info")',
        "# update ferry.table_info set x = 1\nx = 1",
        'conn.execute("update ferry.other set x = 1")',
        'sql.SQL("select {} from {}").format(a, sql.Identifier("ferry", "table_info"))',
        'sql.SQL("update {} set x = 1").format(sql.Identifier("ferry", "sync_request"))',
    ]
    for source in passed:
        assert writes(source) == [], source


def test_only_the_registry_writes_its_tables() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if REGISTRY in path.parents:
            continue
        for line in writes(path.read_text(encoding="utf-8")):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert not offenders, (
        "SQL writing ferry.table_info / ferry.seq_info outside pgferry.registry "
        "(use a function of pgferry.registry): " + ", ".join(offenders)
    )
