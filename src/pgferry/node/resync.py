"""``resync``: tables of a branch or leaf copied again, from the provider or a copy node.

Every table is checked first (registered here and on its provider, the copy node holding
it ok, a merged table resynced on every part): a refusal changes nothing.  The tables of one
command become one copy group per queue (:func:`pgferry.registry.entries.resync_tables`).
"""

from __future__ import annotations

import logging

import psycopg

from pgferry.config import Config
from pgferry.errors import NodeError, TableError, UsageError
from pgferry.handlers import lake
from pgferry.node import connect, copymode, copynode, merge, model
from pgferry.node.tableops import provider_conn, resolve
from pgferry.registry import catalog, entries
from pgferry.registry.names import parse_pattern, split_qualified

log = logging.getLogger(__name__)


def resync(
    config: Config,
    conn: psycopg.Connection,
    args: list[str],
    all_: bool,
    copy_node: str | None = None,
    merge_all: bool = False,
    copy_mode: str | None = None,
) -> list[str]:
    """Copy ``args`` again; from ``copy_node`` when given (else from the provider); with
    ``merge_all`` on every part of a merge leaf's set; ``copy_mode`` (chunked, snapshot)
    replaces the stored choice (None keeps it)."""
    queue = connect.queue_name(config)
    node = model.require_node(conn, queue)
    if node.is_root:
        raise NodeError(f"resync is not possible on the root node: {node.node_name}")
    registered = [t.table_name for t in entries.list_tables(conn, queue)]
    if all_:
        names = registered
    else:
        if not args:
            raise UsageError("resync: give TABLE names or --all")
        keys = [split_qualified(n) for n in registered]
        fq_of = dict(zip(keys, registered, strict=True))
        try:
            names = [fq_of[k] for k in resolve(map(parse_pattern, args), keys, "Table")]
        except TableError as exc:
            raise TableError(f"{exc} (not added on this node)") from None
    for part in merge.check_resync(conn, node, names, merge_all):
        here = {t.table_name for t in entries.list_tables(conn, part.queue_name)}
        mine = [fq for fq in names if fq in here]
        with provider_conn(config, part) as prov:
            on_provider = {t.table_name for t in entries.list_tables(prov, part.queue_name)}
            # A lake table made for another key than the source's now is not loaded again.
            resynced = [
                (e.table_name, e.table_attrs or {})
                for e in entries.list_tables(conn, part.queue_name)
                if e.table_name in mine and e.table_name in on_provider
            ]
            lake.check_resync(resynced, lambda t: catalog.primary_key(prov, t), config)
        for fq in mine:
            if fq not in on_provider:
                raise TableError(f"Table not replicated on the provider: {fq}")
        if mine and copy_node:
            copynode.check(copynode.dsn_of(config), conn, part, mine, copy_node)
        if mine and copy_mode == "chunked":
            _check_chunked(config, conn, part, mine, copy_node)
        if mine:
            entries.resync_tables(conn, part.queue_name, mine, copy_node, copy_mode)
        for fq in mine:
            log.info("Table %s will be copied again%s", fq,
                     f" (queue {part.queue_name})" if merge_all else "")  # fmt: skip
    return names


def _check_chunked(
    config: Config,
    conn: psycopg.Connection,
    part: model.NodeInfo,
    tables: list[str],
    copy_node: str | None,
) -> None:
    """Refuse ``--copy-mode=chunked`` for a table that cannot be copied so."""
    with provider_conn(config, part) as prov:
        for fq in tables:
            entry = entries.get_table(conn, part.queue_name, fq)
            attrs = dict(entry.table_attrs if entry else {})
            attrs.pop("copy_node", None)
            if copy_node:
                attrs["copy_node"] = copy_node
            why = copymode.refusal(prov, fq, attrs)
            if why:
                raise UsageError(f"resync: {fq} cannot be copied in chunks: {why}")
