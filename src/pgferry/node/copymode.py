"""How a table's initial copy is made: under one snapshot, or in key-range chunks.

A chunked copy (:mod:`pgferry.pipeline.copy.chunked`) reads each range of the table's
primary key in a short provider transaction of its own and holds no snapshot across them;
replay then applies every event after the tick recorded before the first chunk.  That
converges only when applying an event's row image is idempotent and ordered per key: the
handler's apply must be the default upsert of full row images (``bulk``, ``shard``: see
:attr:`pgferry.handlers.api.Handler.chunked_copy`) and the table must have a primary key on
the provider that its capture keys events by.  Other tables, and copies read from another
node (``--copy-node``), keep the one-snapshot copy.

The choice: ``--copy-mode=chunked|snapshot`` of add-table / resync (``table_attrs.copy_mode``)
forces it; otherwise a table larger than the ini setting ``copy_snapshot_max`` (its heap and
TOAST, ``pg_table_size`` on the provider) is chunked, every table that can be when it is 0.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from pgferry.errors import UsageError
from pgferry.handlers import registry as handler_registry
from pgferry.handlers.api import HandlerContext
from pgferry.registry import catalog

log = logging.getLogger(__name__)

MODES = ("chunked", "snapshot")


def check_mode(mode: str | None, command: str) -> None:
    if mode is not None and mode not in MODES:
        raise UsageError(f"{command}: --copy-mode is chunked or snapshot, not {mode!r}")


def refusal(prov: psycopg.Connection, table: str, attrs: Mapping[str, Any]) -> str | None:
    """Why ``table`` (registry attributes ``attrs``) cannot be copied in chunks, or None.

    ``prov``: a connection to the database the copy reads (its catalog names the key).
    """
    # Whether a handler copies in chunks is its own: no node's settings are needed.
    handler = handler_registry.from_attrs(dict(attrs), HandlerContext())
    if not handler.chunked_copy:
        return f"handler {handler.name or type(handler).__name__} does not apply full row images"
    if attrs.get("copy_node"):
        return "a copy from another node is made under one snapshot"
    pkey = catalog.primary_key(prov, table)
    if not pkey:
        return "it has no primary key"
    key = (attrs.get("capture") or {}).get("key")
    if key is not None and list(key) != pkey:
        return "its capture keys events by other columns than its primary key"
    return None


def chunked(
    prov: psycopg.Connection,
    local: psycopg.Connection,
    tables: Sequence[str],
    dests: Sequence[str],
    attrs: Sequence[Mapping[str, Any]],
    snapshot_max: int,
) -> bool:
    """Whether a copy group is copied in chunks: every table can be (and its destination
    here has the same primary key: the upsert's conflict target), none is forced to a
    snapshot, and one is forced to chunks or larger than ``snapshot_max`` bytes."""
    modes = [a.get("copy_mode") for a in attrs]
    if "snapshot" in modes:
        return False
    for table, dest, attr in zip(tables, dests, attrs, strict=True):
        why = refusal(prov, table, attr)
        if why is None and catalog.primary_key(local, dest) != catalog.primary_key(prov, table):
            why = f"its destination {dest} has another primary key"
        if why:
            if attr.get("copy_mode") == "chunked":
                log.warning("Table %s is copied under one snapshot: %s", table, why)
            return False
    if "chunked" in modes or snapshot_max == 0:
        return True
    row = prov.execute(
        "select max(pg_table_size(t::regclass)) from unnest(%s::text[]) as t", (list(tables),)
    ).fetchone()
    return bool(row and row[0] is not None and row[0] > snapshot_max)
