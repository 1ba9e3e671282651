"""No import circles between pgferry's modules (docs/architecture.md, "Imports as they are").

Every import of every module under src/pgferry is read from its syntax tree: at module
level, inside functions and under ``TYPE_CHECKING`` alike, since a circle drawn lazily is
still a circle in the design.  No database, no Spark: the modules are parsed, not imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "pgferry"

# Circles that are known and being taken apart; each entry is one circle's modules.  A
# circle not listed fails the test; an entry whose circle is gone is simply left over.
KNOWN_CIRCLES: set[frozenset[str]] = set()


def module_names() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The pgferry modules that module ``name`` imports anywhere in its text."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # A relative import: from the module's own package, then up level - 1.
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                # ``from pkg import mod`` imports the module; ``from mod import name`` the
                # module holding the name.
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else base)
    return {t for t in targets if t in modules and t != name}


def graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imported(name, path, modules) for name, path in modules.items()}


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_parse_sees_imports_inside_functions() -> None:
    edges = graph()
    # cli/cmd_worker.py imports the worker inside its command function only; the metrics
    # collector names it under TYPE_CHECKING only.
    assert "pgferry.apply.worker" in edges["pgferry.cli.cmd_worker"]
    assert "pgferry.apply.worker" in edges["pgferry.metrics.worker"]
    assert "pgferry.handlers.staged" in edges["pgferry.handlers.upsert"]


def test_no_import_circles() -> None:
    found = circles(graph())
    unknown = [sorted(c) for c in found if c not in KNOWN_CIRCLES]
    assert not unknown, f"import circles: {unknown}"
