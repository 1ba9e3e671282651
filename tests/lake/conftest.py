"""Fixtures of the lake tests: a root and a lake leaf whose lake is a temporary folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("deltalake")


@pytest.fixture
def lake_dir(tmp_path: Path) -> Path:
    path = tmp_path / "lake"
    path.mkdir()
    return path


@pytest.fixture
def lake_pair(make_pair, lake_dir: Path) -> Callable[..., object]:
    """A root and a leaf with ``lake_path`` set (``**settings`` add to the leaf's ini)."""

    def build(**settings: str):
        return make_pair(lake_path=str(lake_dir), **settings)

    return build


def sorted_rows(rows) -> list[tuple]:
    return sorted((tuple(r) for r in rows), key=repr)


@pytest.fixture
def delta_rows(lake_dir: Path) -> Callable[[str], list[tuple]]:
    """``delta_rows(table)``: the rows of the Delta table public/<table>, sorted."""

    def read(table: str) -> list[tuple]:
        from pgferry.lake import delta

        rows = delta.rows_at(str(lake_dir / "public" / table)).to_pylist()
        return sorted_rows(tuple(r.values()) for r in rows)

    return read
