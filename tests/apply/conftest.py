"""Fixtures of the replay and worker tests (the cascades come from tests/fixtures/)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pgferry.config import Config, load_config
from pgferry.testing.cascade import write_ini


@pytest.fixture
def ini() -> Callable[..., Config]:
    """``ini(path, key=value, ...)`` writes a [pgferry] config and loads it."""

    def make(path: Path, **values: str) -> Config:
        return load_config(write_ini(path, **values))

    return make
