"""Fixtures of the pipeline tests: a source database on cluster A, a destination on B."""

from __future__ import annotations

import pytest


@pytest.fixture
def both(db_a: str, db_b: str) -> tuple[str, str]:
    """A fresh source database on cluster A and destination on cluster B."""
    return db_a, db_b
