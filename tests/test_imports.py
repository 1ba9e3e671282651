"""No import circles between pgferry's modules, and imports that point down the layers
(docs/architecture.md, "Layers and rooms" and "Imports as they are").

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


# The rooms, top to bottom, as docs/architecture.md draws them: a room imports rooms of the
# rows below it; within a row only the pairs of SIDEWAYS.  A module of src/pgferry itself is
# a base module; the rooms outside the layers (OUTSIDE) may import any room.
LAYERS: list[tuple[str, ...]] = [
    ("cli",),
    ("apply", "scripts", "stream"),
    ("sync",),
    ("pipeline",),
    ("node", "registry"),
    ("handlers",),
    ("lake",),
    ("queue",),
    ("base", "metrics"),
]
OUTSIDE = {"__main__", "demo", "testing"}
SIDEWAYS = {
    ("apply", "scripts"),  # replay runs queued scripts at their place in a batch
    ("stream", "scripts"),  # a feed's queued statements, translated and named
    ("node", "registry"),  # node commands change and read the registry rows
    ("metrics", "base"),  # the base modules among themselves: no circle (checked above)
    ("base", "base"),
}
# Imports up the layers, each with its reason (docs/architecture.md, "Upwards").
UPWARDS = {
    # The worker's and ticker's scrape reads what status reads, inside the functions
    # (and the collectors' types under TYPE_CHECKING).
    ("metrics", "apply"),
    ("metrics", "node"),
    ("metrics", "pipeline"),
    ("metrics", "queue"),
    ("metrics", "registry"),
    # The lake handler asks the node where the batch it applies starts (model.batch_start).
    ("handlers", "node"),
}


def room_of(module: str) -> str:
    """A module's room: its folder under pgferry, or ``base`` for a module of its own."""
    parts = module.split(".")
    if len(parts) == 1:
        return "base"  # the package's face: its version
    if len(parts) == 2 and not (PACKAGE / parts[1]).is_dir():
        return parts[1] if parts[1] in OUTSIDE else "base"
    return parts[1]


def test_imports_point_down_the_layers() -> None:
    row = {room: n for n, rooms in enumerate(LAYERS) for room in rooms}
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders - OUTSIDE <= set(row), f"rooms missing from LAYERS: {folders - set(row)}"
    wrong = []
    for module, targets in graph().items():
        src = room_of(module)
        if src in OUTSIDE:
            continue
        for target in targets:
            dst = room_of(target)
            if dst == src and src != "base":
                continue
            pair = (src, dst)
            if dst in OUTSIDE:  # nothing in the layers imports the harness or the demo
                wrong.append(f"{module} -> {target}")
            elif row[src] < row[dst] or pair in SIDEWAYS or pair in UPWARDS:
                continue
            wrong.append(f"{module} -> {target}")
    assert not wrong, f"imports against the layers: {sorted(wrong)}"


def test_the_layer_check_sees_an_upward_import() -> None:
    row = {room: n for n, rooms in enumerate(LAYERS) for room in rooms}
    assert room_of("pgferry.sync.point") == "sync"
    assert room_of("pgferry.db") == "base"
    # apply serves compare's requests through sync/, which must not import apply/ back.
    assert row["apply"] < row["sync"] < row["pipeline"]
    assert ("sync", "apply") not in SIDEWAYS | UPWARDS


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
