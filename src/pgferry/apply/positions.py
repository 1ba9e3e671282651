"""Where a node stands on its provider's queue: taking a batch, and keeping positions in step.

The node's own recorded tick is the truth (the apply transaction records it with the rows).
A tick is known by its id and the provider's time of it, which the node records beside the
id: a provider that failed over to a standby lacking its last ticks makes new ticks under
the same ids at other times, and :func:`same_tick` tells them apart (docs/failover.md).
:func:`follows` checks that a batch handed out by the provider starts there, and puts the
provider's position back in step when it does not; it serves the main stream and the
copied groups' own consumers alike (how large a batch the main stream asks for is the
queue's rule, :class:`pgferry.queue.batches.BatchRule`), and :func:`reposition` is
``worker --rewind`` / ``--reset``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

import psycopg

from pgferry.config import Config
from pgferry.db import connect
from pgferry.errors import DivergedProvider, NodeError, QueueError
from pgferry.node import model
from pgferry.node.connect import local_connstr, queue_name, remote_connstr
from pgferry.queue import api as queue_api
from pgferry.queue import batches as queue_batches
from pgferry.queue import ticks as queue_ticks
from pgferry.queue.batches import Batch

log = logging.getLogger(__name__)


def follows(
    provider: psycopg.Connection,
    queue: str,
    consumer: str,
    recorded: int | None,
    batch: Batch,
    *,
    recorded_time: datetime | None = None,
    already_applied: Callable[[], None] | None = None,
) -> bool:
    """True when ``batch`` starts at ``recorded``, the tick applied here; otherwise bring
    the provider in step and apply nothing.

    A batch ending at ``recorded`` was applied before a crash that lost its finish: it is
    finished now (after ``already_applied``, e.g. a branch making its mirrored tick).  A
    batch starting anywhere else means the provider's position moved on without this node
    (a commit lost here) or fell back (a finish lost there): it is moved to ``recorded``.
    ``recorded_time`` (the provider's time of ``recorded`` as recorded here) is checked
    first: the provider's tick of that id must be the same tick, or DivergedProvider.
    """
    if recorded is not None and recorded == batch.tick_id:
        check_tick(recorded, recorded_time, batch.tick_time, consumer)
    elif recorded is not None and recorded == batch.prev_tick_id:
        check_tick(recorded, recorded_time, batch.prev_tick_time, consumer)
    elif recorded is not None:
        same_tick(provider, queue, consumer, recorded, recorded_time)
    if recorded == batch.tick_id:
        log.info("Batch %s (tick %s) already applied, finishing it", batch.batch_id, batch.tick_id)
        if already_applied is not None:
            already_applied()
        queue_batches.finish_batch(provider, batch.batch_id)
        return False
    if recorded is not None and recorded != batch.prev_tick_id:
        previous = rewind_provider(provider, queue, consumer, recorded)
        log.warning(
            "Provider position of %s was tick %s, this node applied up to tick %s: repositioned",
            consumer,
            previous,
            recorded,
        )
        return False
    return True


def check_tick(
    tick: int, recorded_time: datetime | None, provider_time: datetime | None, consumer: str
) -> None:
    """DivergedProvider unless the provider's tick ``tick`` was made at ``recorded_time``
    (a time unknown on either side passes: a position set before times were compared)."""
    if recorded_time is None or provider_time is None or recorded_time == provider_time:
        return
    raise DivergedProvider(
        f"Diverged provider: {consumer} applied tick {tick} made at {recorded_time}, but the"
        f" provider's tick {tick} was made at {provider_time}: the provider lost ticks this"
        " node applied (failover to a standby that lacked them); see docs/failover.md"
    )


def same_tick(
    provider: psycopg.Connection,
    queue: str,
    consumer: str,
    tick: int,
    recorded_time: datetime | None,
) -> None:
    """Before a position is moved to ``tick``: the provider's tick of that id must be the
    one applied here.  A provider that holds no tick of that id but older ones never made
    it (a standby promoted without it: its tick ids go on after a gap, or not yet so far);
    one whose ticks all come later has rotated it away (rewind_provider says so)."""
    if recorded_time is None:
        return
    found = queue_ticks.tick_time(provider, queue, tick)
    if found is not None:
        check_tick(tick, recorded_time, found, consumer)
        return
    oldest, newest = queue_ticks.tick_range(provider, queue)
    if oldest is not None and oldest < tick:
        raise DivergedProvider(
            f"Diverged provider: {consumer} applied tick {tick} made at {recorded_time}, but the"
            f" provider holds ticks {oldest} to {newest} and never made tick {tick}: it lost"
            " ticks this node applied (failover to a standby that lacked them);"
            " see docs/failover.md"
        )


def rewind_provider(provider: psycopg.Connection, queue: str, consumer: str, tick: int) -> int:
    """This node's recorded tick is the truth: move the provider's position to it."""
    try:
        return queue_api.rewind(provider, queue, consumer, tick)
    except QueueError as exc:
        raise NodeError(
            f"Lost position: this node applied up to tick {tick}, but {exc}; reposition with"
            " 'worker --reset', then resync this node's tables (resync --all)"
        ) from None


def reposition(config: Config, *, reset: bool) -> None:
    """Put this node's consumer position on its provider back in line with the node.

    Rewind: to the tick last applied here (after a restore of the provider).  Reset: to the
    provider's newest tick, recorded here too: everything in between is skipped, so the
    tables must be resynced afterwards.
    """
    queue = queue_name(config)
    with connect(local_connstr(config)) as local:
        node = model.worker_node(local, queue)
        if node.node_type == "root" or node.provider_location is None:
            raise NodeError("--rewind / --reset are for branch and leaf nodes")
        with connect(remote_connstr(config, node.provider_location), autocommit=True) as prov:
            tick = queue_ticks.last_tick(prov, queue)[0] if reset else node.last_tick_id
            if tick is None:
                raise NodeError("no tick to reposition to")
            if not reset:
                same_tick(prov, queue, node.consumer_name, tick, node.last_tick_time)
            tick_time = queue_ticks.tick_time(prov, queue, tick)
            if reset:
                queue_api.register_at(prov, queue, node.consumer_name, tick)
            else:
                rewind_provider(prov, queue, node.consumer_name, tick)
        if reset:
            model.set_position(local, queue, node.consumer_name, tick, tick_time)
    log.info("Consumer %s positioned at tick %s", node.consumer_name, tick)
