"""add-seq and remove-seq, and the values replicated sequences are kept at.

On the root a sequence is registered with its current value; the root worker then
publishes it ahead of what the root hands out (:func:`publish_ahead`).  On a subscriber it
must be registered on the provider; it is marked local and set to the provider's value,
never backwards.  Takeover uses :func:`final_values`, :func:`advance` and
:func:`advance_past_published` so that a new root never hands out a value the old one did.
remove-seq on a root or branch reaches its subscribers as an event (:func:`removed_upstream`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import psycopg

from pgferry import settings
from pgferry.config import Config
from pgferry.errors import ConfigError, TableError, UsageError
from pgferry.events import REMOVE_SEQ_EVENT, SEQ_EVENT
from pgferry.node import connect, model
from pgferry.node.tableops import provider_conn, resolve
from pgferry.queue.api import insert_event
from pgferry.registry import catalog, entries
from pgferry.registry.names import parse_pattern, split_qualified

log = logging.getLogger(__name__)

# How far ahead of its sequences the root publishes them, in values handed out (nextval
# calls).  The root publishes again once less than half of it is left, so it keeps ahead
# while one sequence hands out fewer than half a buffer between two loops of the root
# worker (1 s by default): 10000 covers 5000 values a second with one SEQ event per 5000
# values, the same order as Londiste's 10000.  A larger buffer costs only a gap: a
# switchover skips up to one buffer of values and a failover up to two, nothing for bigint
# keys and little for int ones.
DEFAULT_SEQ_BUFFER = settings.SEQ_BUFFER.fixed


def seq_buffer(config: Config) -> int:
    """The ``seq_buffer`` setting: a positive number of values."""
    value = config.get(settings.SEQ_BUFFER)
    if value < 1:
        raise ConfigError(f"{config.path}: setting 'seq_buffer' must be at least 1, not {value}")
    return value


def add_seqs(
    config: Config,
    conn: psycopg.Connection,
    args: list[str],
    *,
    all_: bool = False,
    create: bool = False,
    skip_non_existing: bool = False,
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
            skip = "on this node" if skip_non_existing else None
            keys = resolve(map(parse_pattern, args), list(by_key), "Sequence", skip)
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
                skip = "on the provider" if skip_non_existing else None
                found = resolve(map(parse_pattern, args), list(keys_of), "Sequence", skip)
            except TableError as exc:
                raise TableError(f"{exc} (not registered on the provider)") from None
            names = [keys_of[k] for k in found]
        values = {n: _provider_value(prov, provider_seqs[n]) for n in names}
    added = []
    for name in names:
        schema, seq = split_qualified(name)
        if catalog.find_relation(conn, schema, seq, "S") is None:
            if not create and skip_non_existing:
                log.warning("Sequence not found on local node: %s, skipped", name)
                continue
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
    """Detach sequences from the local node; returns the names removed.

    A root or branch also queues a :data:`REMOVE_SEQ_EVENT` per sequence in this same
    transaction, so that its whole subtree detaches it too (:func:`removed_upstream`).
    """
    queue = connect.queue_name(config)
    node = model.require_node(conn, queue)
    names = [s.seq_name for s in entries.list_seqs(conn, queue)]
    if not all_:
        if not args:
            raise UsageError("remove-seq: give SEQUENCE names or --all")
        keys_of = {split_qualified(n): n for n in names}
        names = []
        for pattern in map(parse_pattern, args):
            found = pattern.select(keys_of)
            if not found and not pattern.is_glob:
                raise TableError(f"Sequence not registered: {pattern.raw}")
            if not found:
                log.warning("no sequence matches %s", pattern.raw)
            names += [keys_of[k] for k in found if keys_of[k] not in names]
    for name in names:
        entries.unregister_seq(conn, queue, name)
        if node.has_queue:
            insert_event(conn, queue, REMOVE_SEQ_EVENT, name, name, node.node_name)
        log.info("Sequence removed: %s%s", name, "" if node.has_queue else " (local)")
    return names


def removed_upstream(conn: psycopg.Connection, queue: str, seq: str) -> bool:
    """The provider removed ``seq`` (a :data:`REMOVE_SEQ_EVENT` being applied): forget it
    here too; the sequence keeps its value.  False when this node did not replicate it."""
    local = {s.seq_name for s in entries.list_seqs(conn, queue)}
    return seq in local and entries.unregister_seq(conn, queue, seq)


# --- values kept ahead ---------------------------------------------------------------------
@dataclass(frozen=True)
class SeqState:
    """A local sequence of the registry as it stands now."""

    seq_name: str
    position: int  # the last value handed out (the start value while it was never used)
    published: int | None  # seq_info.last_value: the newest value published or applied
    step: int  # the increment (a sequence counting down is treated as counting by 1)
    maxvalue: int

    def ahead(self, buffer: int, base: int | None = None) -> int:
        """``buffer`` values past ``base`` (default: the position), within the maximum."""
        start = self.position if base is None else base
        return min(start + buffer * self.step, self.maxvalue)

    def known(self) -> int:
        """The highest of the position and the value published or applied."""
        return max(self.position, self.published if self.published is not None else 0)


def states(conn: psycopg.Connection, queue: str, *, lock: bool = False) -> list[SeqState]:
    """The node's local sequences that exist; ``lock`` takes their ``seq_info`` rows."""
    return [SeqState(**asdict(p)) for p in entries.seq_positions(conn, queue, lock=lock)]


def _due(state: SeqState, buffer: int) -> int | None:
    """The value to publish for ``state`` now, or None while enough is left ahead."""
    target = state.ahead(buffer)
    if state.published is None:
        return target
    if target <= state.published:
        return None  # nothing moved since the last publish (or the maximum is reached)
    if state.published - state.position > buffer * state.step // 2:
        return None  # more than half a buffer left: no event
    return target


def publish_ahead(conn: psycopg.Connection, queue: str, buffer: int) -> dict[str, int]:
    """Queue a ``SEQ`` event of position + ``buffer`` for each local sequence with half a
    buffer or less left ahead of it (or never published); returns what was published.

    Run on a root, in the caller's transaction.  When nothing is due this is one read and
    no write; otherwise the rows are locked and looked at again, so two publishers (the
    worker and a takeover) never publish less than the other did.
    """
    if not any(_due(s, buffer) is not None for s in states(conn, queue)):
        return {}
    sent: dict[str, int] = {}
    for state in states(conn, queue, lock=True):
        value = _due(state, buffer)
        if value is None:
            continue
        insert_event(conn, queue, SEQ_EVENT, str(value), state.seq_name)
        entries.set_seq_published(conn, queue, state.seq_name, value)
        sent[state.seq_name] = value
    return sent


def final_values(conn: psycopg.Connection, queue: str) -> dict[str, int]:
    """Per local sequence, the highest value the node has handed out or published."""
    return {s.seq_name: s.known() for s in states(conn, queue)}


def advance(conn: psycopg.Connection, queue: str, values: Mapping[str, int]) -> None:
    """Move local sequences (and their recorded values) up to ``values``, never back."""
    for name, value in sorted(values.items()):
        entries.advance_seq(conn, queue, name, value)


def advance_past_published(conn: psycopg.Connection, queue: str, buffer: int) -> dict[str, int]:
    """Move every local sequence ``buffer`` values past the newest value it knows (the last
    one published to it, or its own position when higher); returns the new values.

    What a dead root handed out after its last publish that reached this node is unknown,
    but it publishes again before it can pass that value: one lost publish is covered.
    """
    values = {s.seq_name: s.ahead(buffer, s.known()) for s in states(conn, queue, lock=True)}
    advance(conn, queue, values)
    return values


def listing(values: Mapping[str, int]) -> str:
    """``name=value, ...`` in name order, for log lines and command output."""
    return ", ".join(f"{name}={value}" for name, value in sorted(values.items()))
