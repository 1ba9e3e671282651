"""Every function pgferry installs pins its search_path (``pg_proc.proconfig``).

A function that runs with its caller's path resolves a bare name by whatever that caller
(a psql session of a superuser, an application) has on it, ``public`` included.  pgferry's
own sessions pin the path too (``db.connect``); the functions' own setting keeps them
safe from any other caller.  Names of the functions that do not pin it, each with the
reason, are in :data:`UNPINNED`; the test fails for any other function, and for a name
of :data:`UNPINNED` that pins it after all (so that the list stays true).
"""

from __future__ import annotations

import psycopg

from pgferry import schema

PINNED = "search_path=pg_catalog, pg_temp"
SCHEMAS = ("ferry_queue", "ferry_node", "ferry", "ferry_copy")

# The functions that keep no SET search_path, each with the reason; their bodies name every
# object with its schema.  (The capture functions add-table generates per table are not
# in an install: a plain one, which runs on every row written, has no SET either, and
# tests/queue/test_trust_boundary.py shows a writer's path cannot reach into it.)
UNPINNED = {
    # Inlined into the ticker's round, once per queue: schema-qualified instead (its file).
    "ferry_queue.seq_position",
    # The plain row capture in C, where the install could make it: it runs on every row
    # written, and a SET on a C function would cost a GUC save and restore per row; the SQL
    # it runs names every object and operator with its schema (ext/pgferry_capture).
    "ferry_queue.plain_row_capture",
}


def test_every_function_pins_its_search_path(db_a: str) -> None:
    with psycopg.connect(db_a, autocommit=True) as conn:
        schema.install(conn, (*schema.COMPONENTS, "copy"))
        rows = conn.execute(
            "select n.nspname || '.' || p.proname, p.oid::regprocedure::text,"
            " coalesce(p.proconfig, '{}')"
            " from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
            " where n.nspname = any(%s)",
            (list(SCHEMAS),),
        ).fetchall()
    assert len(rows) > 60  # the whole install, not an empty schema
    unpinned = sorted(sig for name, sig, config in rows
                      if PINNED not in config and name not in UNPINNED)  # fmt: skip
    assert unpinned == []
    stale = sorted({name for name, _, config in rows if name in UNPINNED and PINNED in config})
    assert stale == []
