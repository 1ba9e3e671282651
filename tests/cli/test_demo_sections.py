"""``make demo`` numbers its sections 1, 2, ... in the order they run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from pgferry.demo import Demo

pytestmark = pytest.mark.pure


def test_sections_numbered_in_order(tmp_path: Path) -> None:
    console = Console(record=True, width=100)
    demo = Demo(console, tmp_path)
    for title in ("first", "second", "third"):
        demo.step(title)
    demo.step("result", numbered=False)
    text = console.export_text()
    assert re.findall(r"(\d+): (\w+)", text) == [("1", "first"), ("2", "second"), ("3", "third")]
    assert "result" in text


def test_demo_steps_are_not_numbered_by_hand() -> None:
    """Every section title in demo.py is numbered by Demo.step, so the numbers cannot go out
    of order again."""
    source = Path(__file__).parents[2].joinpath("src/pgferry/demo.py").read_text()
    titles = re.findall(r'demo\.step\("([^"]*)"', source)
    assert len(titles) >= 6
    assert not [t for t in titles if re.match(r"\d", t)], titles
