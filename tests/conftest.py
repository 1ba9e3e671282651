"""The tests' fixtures, loaded as plugins from tests/fixtures/ (one module per subject).

- ``fix_pg``: PostgreSQL clusters ``pg_a`` / ``pg_b`` and fresh databases (``db_a``, ...).
- ``fix_spark``: the session's one local SparkSession ``spark`` and ``connect_server``.
- ``fix_cli``: the command line in-process (``cli``) and a node's ini (``write_ini``).
- ``fix_cascade``: cascades (``make_cascade``, ``pair``, ``tree``) built by
  :mod:`pgferry.testing.cascade`.

A folder's conftest.py holds only what that folder's tests share; no test imports one.
"""

pytest_plugins = [
    "tests.fixtures.fix_pg",
    "tests.fixtures.fix_spark",
    "tests.fixtures.fix_cli",
    "tests.fixtures.fix_cascade",
]
