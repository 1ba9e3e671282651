"""add-seq and remove-seq: the sequence registry checked against the node.

On the root a sequence is registered with its current value (the root worker keeps
``last_value`` moving).  On a subscriber it must be registered on the provider; it is
marked local and set to the provider's value, never backwards.
"""

from __future__ import annotations

import logging

import psycopg

from pgferry.config import Config
from pgferry.errors import TableError, UsageError
from pgferry.node import connect, model
from pgferry.node.tableops import provider_conn, resolve
from pgferry.registry import catalog, entries
from pgferry.registry.names import parse_pattern, split_qualified

log = logging.getLogger(__name__)


def add_seqs(
    config: Config,
    conn: psycopg.Connection,
    args: list[str],
    *,
    all_: bool = False,
    create: bool = False,
) -> list[str]:
    queue = connect.queue_name(config)
    node = model.require_node(conn, queue)
    if not args and not all_:
        raise UsageError("add-seq: give SEQUENCE names or --all")
    if node.is_root:
        if create:
            raise UsageError("add-seq: --create is for branch and leaf nodes only")
        seqs = catalog.list_relations(conn, "S")
        by_key = {s.key: s for s in seqs}
        local = {s.seq_name for s in entries.list_seqs(conn, queue)}
        if all_:
            keys = [s.key for s in seqs if s.fq not in local]
        else:
            keys = resolve(map(parse_pattern, args), list(by_key), "Sequence")
        added = []
        for key in keys:
            fq = by_key[key].fq
            entries.register_seq(conn, queue, fq, catalog.sequence_value(conn, fq))
            log.info("Sequence added: %s", fq)
            added.append(fq)
        return added
    with provider_conn(config, node) as prov:
        provider_seqs = {s.seq_name: s for s in entries.list_seqs(prov, queue)}
        keys_of = {split_qualified(name): name for name in provider_seqs}
        if all_:
            local = {s.seq_name for s in entries.list_seqs(conn, queue)}
            names = [n for n in provider_seqs if n not in local]
        else:
            try:
                found = resolve(map(parse_pattern, args), list(keys_of), "Sequence")
            except TableError as exc:
                raise TableError(f"{exc} (not registered on the provider)") from None
            names = [keys_of[k] for k in found]
        values = {n: _provider_value(prov, provider_seqs[n]) for n in names}
    added = []
    for name in names:
        schema, seq = split_qualified(name)
        if catalog.find_relation(conn, schema, seq, "S") is None:
            if not create:
                raise TableError(f"Sequence not found on local node: {name} (use --create)")
            catalog.create_sequence(conn, schema, seq)
        value = values[name]
        if value is not None:
            conn.execute(
                """
                select setval(%s::regclass,
                              greatest(%s, coalesce(pg_sequence_last_value(%s::regclass), %s)))
                """,
                (name, value, name, value),
            )
        entries.register_seq(conn, queue, name, value)
        log.info("Sequence added: %s", name)
        added.append(name)
    return added


def _provider_value(prov: psycopg.Connection, entry: entries.SeqEntry) -> int | None:
    """The provider's newest known value: its own sequence when present, else its record."""
    schema, seq = split_qualified(entry.seq_name)
    values = [entry.last_value]
    if catalog.find_relation(prov, schema, seq, "S") is not None:
        values.append(catalog.sequence_value(prov, entry.seq_name))
    known = [v for v in values if v is not None]
    return max(known) if known else None


def remove_seqs(
    config: Config, conn: psycopg.Connection, args: list[str], all_: bool = False
) -> list[str]:
    queue = connect.queue_name(config)
    model.require_node(conn, queue)
    names = [s.seq_name for s in entries.list_seqs(conn, queue)]
    if not all_:
        if not args:
            raise UsageError("remove-seq: give SEQUENCE names or --all")
        keys_of = {split_qualified(n): n for n in names}
        names = [keys_of[k] for k in resolve(map(parse_pattern, args), list(keys_of), "Sequence")]
    for name in names:
        entries.unregister_seq(conn, queue, name)
        log.info("Sequence removed: %s", name)
    return names
