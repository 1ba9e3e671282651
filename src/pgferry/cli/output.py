"""Terminal output: rich tables on a terminal, plain dashed tables otherwise.

The plain form follows the original tools' layout (header, a line of dashes, rows) so
scripts that parsed it keep working.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def is_terminal() -> bool:
    return sys.stdout.isatty()


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None
) -> None:
    if is_terminal():
        # Loaded only here: every command module imports this one, the worker too (2 MB).
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, show_lines=False)
        for header in headers:
            table.add_column(header)
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
        Console().print(table)
        return
    if title:
        print(title)
    widths = [len(h) for h in headers]
    for row in rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(_cell(value)))
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(_cell(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str, ensure_ascii=False))
