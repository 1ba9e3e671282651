"""The tests' fixtures, loaded as plugins from tests/fixtures/ (one module per subject).

- ``fix_pg``: PostgreSQL clusters ``pg_a`` / ``pg_b`` and fresh databases (``db_a``, ...).
- ``fix_spark``: the session's one local SparkSession ``spark`` and ``connect_server``.
- ``fix_cli``: the command line in-process (``cli``) and a node's ini (``write_ini``).
- ``fix_cascade``: cascades (``make_cascade``, ``pair``, ``tree``) built by
  :mod:`pgferry.testing.cascade`.

A folder's conftest.py holds only what that folder's tests share; no test imports one.

A module marked ``pure`` (``pytestmark = pytest.mark.pure``) needs no PostgreSQL and no
Spark: ``pytest -m pure`` runs those in seconds, before the scenarios.
"""

import pytest

pytest_plugins = [
    "tests.fixtures.fix_pg",
    "tests.fixtures.fix_spark",
    "tests.fixtures.fix_cli",
    "tests.fixtures.fix_cascade",
]

# The fixtures that start PostgreSQL or Spark (or build on one that does): a test marked
# ``pure`` (the fast tier, ``pytest -m pure``) may use none of them.
SERVER_FIXTURES = frozenset({
    "pg_a", "pg_b", "new_db_a", "new_db_b", "db_a", "db_b", "new_db", "server", "spark",
    "connect_server", "cli", "capsys_cli", "make_cascade", "make_pair", "make_tree", "pair",
    "tree", "both", "qdb", "qconn", "scalar", "lake_pair",
})  # fmt: skip


# Before pytest-xdist's hook, which reads the xdist_group marks (--dist loadgroup).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Refuse a ``pure`` test that asks for a server: the fast tier stays fast.  Under
    pytest-xdist (``make test``), the tests marked ``timing`` share one process: each
    process has its own clusters and Spark, but two tests that time a daemon's rounds or a
    Spark's start side by side would each slow the other."""
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            if item.get_closest_marker("timing"):
                item.add_marker(pytest.mark.xdist_group("timing"))
    wrong = [
        f"{item.nodeid} uses {', '.join(sorted(used))}"
        for item in items
        if item.get_closest_marker("pure")
        and (used := SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))
    ]
    if wrong:
        raise pytest.UsageError("tests marked pure start a server:\n" + "\n".join(wrong))
