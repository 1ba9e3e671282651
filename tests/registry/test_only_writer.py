"""The registry (``src/pgferry/registry/``) is the only writer of ``ferry.table_info`` and
``ferry.seq_info``: no other module of the package holds SQL that inserts into, updates or
deletes from them, written out or composed with ``sql.Identifier("ferry", ...)``.  (The
SQL files installed into the database are not Python and not scanned.)

Every string literal of every module is read through its syntax tree, so implicit
concatenation and f-strings count, comments do not.
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
