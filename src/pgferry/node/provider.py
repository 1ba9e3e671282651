"""``change-provider``: move a subscriber under another node without loss or duplicates.

The node is paused first; from then on its position (``last_tick_id``) cannot move (see
``ferry_node.local_state_guard``).  Its consumer is registered on the new provider at exactly that
tick — every root and branch holds the same tick ids, so the next batch there starts where
the node stopped — then ``local_state.provider_node`` is switched and the node resumed.  The
old provider forgets the node last; when it is dead that is only a warning.

Watermarks (:mod:`.watermarks`) make every live root and branch keep what any node of the
cascade needs, so the move works after any amount of rotation.  A new provider that lacks
the node's tick (rotated away where no watermark protected it, or skipped by a batch that
spanned several ticks) is refused before anything changes.  The node's watermark moves with
it, so its own subscribers keep what they need on the new provider's side too.  A node
without provider (an old root after ``resurrect``) rejoins this way, and is tagged alive.
"""

from __future__ import annotations

import logging
from datetime import datetime

from pgferry.errors import NodeError, PgferryError
from pgferry.node import cascade, model, watermarks
from pgferry.node.cascade import Cascade, NodeView, set_paused, unregister_subscriber
from pgferry.node.waits import diverged_tick, missing_tick, wait_tick_available
from pgferry.queue import api as queue_api

log = logging.getLogger(__name__)


def check_new_provider(c: Cascade, node: NodeView, new: str) -> NodeView:
    """The new provider must be a live root or branch that is not below ``node``."""
    if new == node.name:
        raise NodeError(f"Node {node.name} cannot be its own provider")
    c.member(new)
    if c.is_dead(new):
        raise NodeError(f"Provider {new} is marked dead")
    target = c.view(new)
    if target.node_type == "leaf":
        raise NodeError(f"Node {new} is a leaf: it has no queue to provide")
    # Walk up from the new provider: meeting the node itself would close a loop.
    name: str | None = target.provider
    seen = {new}
    while name is not None and name not in seen and not c.is_dead(name):
        if name == node.name:
            raise NodeError(f"Node {new} is below {node.name}: it cannot be its provider")
        seen.add(name)
        name = c.view(name).provider
    return target


def change_provider(
    c: Cascade, name: str, new: str, timeout: float = 60.0, poll: float = 0.5
) -> bool:
    """Move node ``name`` under ``new``; False when it already reads from ``new``."""
    c.member(name)
    if c.is_dead(name):
        raise NodeError(f"Node {name} is marked dead")
    node = c.view(name)
    if node.node_type == "root":
        raise NodeError(f"Node {name} is the root: it has no provider")
    if node.provider == new:
        log.info("Node %s already reads from %s", name, new)
        return False
    check_new_provider(c, node, new)
    if node.last_tick is not None:
        # Refused here, before the pause: the position only moves forward from now on.
        _check_holds(c, new, name, node.last_tick, node.last_tick_time)
    old = node.provider

    paused_here = set_paused(c, name, True)
    try:
        frozen = c.view(name)  # its position is frozen now that the pause has committed
        tick = frozen.last_tick
        if tick is None:
            raise NodeError(f"Node {name} has no position (last_tick_id) yet")
        _check_holds(c, new, name, tick, frozen.last_tick_time)
        wait_tick_available(c, new, tick, timeout, poll)
        subscribe(c, new, name, node.worker_name, tick, _watermark(c, name))
        try:
            with c.on(name) as conn:
                conn.execute(
                    """
                    update ferry_node.local_state set provider_node = %s
                     where queue_name = %s and consumer_name = %s
                    """,
                    (new, c.queue, node.worker_name),
                )
        except PgferryError:
            with c.on(new) as conn:
                unregister_subscriber(conn, c.queue, name, node.worker_name)
            raise
    except BaseException:
        if paused_here:
            set_paused(c, name, False)
        raise
    if paused_here:
        set_paused(c, name, False)
    log.info("Node %s now reads from %s at tick %s", name, new, tick)
    if old is not None:
        forget_subscriber(c, old, name, node.worker_name)
    else:
        # Back in the cascade (an old root after resurrect): alive for everybody again.
        cascade.tag(c, name, False)
    return True


def _check_holds(c: Cascade, new: str, name: str, tick: int, tick_time: datetime | None) -> None:
    """``new`` must hold the very tick ``name`` applied last (id and time) and every event
    after it."""
    reason = missing_tick(c, new, tick)
    if reason is not None:
        raise NodeError(f"Node {new} {reason}: node {name} cannot move under it")
    diverged = diverged_tick(c, new, tick, tick_time, name)
    if diverged is not None:
        raise diverged


def _watermark(c: Cascade, name: str) -> int | None:
    """What node ``name`` reports upstream (None when its schema predates watermarks)."""
    with c.on(name, autocommit=True) as conn:
        if not watermarks.supported(conn):
            return None
        return watermarks.upstream_watermark(conn, c.queue)


def subscribe(
    c: Cascade, provider: str, name: str, worker: str, tick: int, watermark: int | None = None
) -> None:
    """On ``provider``: location, consumer at ``tick``, subscriber row of ``name`` and the
    hold of its ``watermark`` (what its own subscribers still need)."""
    with c.on(provider) as conn:
        model.register_location(
            conn, c.queue, name, c.member(name).node_location, c.member(name).dead
        )
        queue_api.register_at(conn, c.queue, worker, tick)
        conn.execute(
            """
            insert into ferry_node.subscriber_info (queue_name, subscriber_node, worker_name)
            values (%s, %s, %s)
            on conflict (queue_name, subscriber_node)
            do update set worker_name = excluded.worker_name
            """,
            (c.queue, name, worker),
        )
        if watermark is not None and watermarks.supported(conn):
            watermarks.hold_subscriber(conn, c.queue, name, min(watermark, tick))


def forget_subscriber(c: Cascade, provider: str, name: str, worker: str | None) -> None:
    """Unregister ``name`` on its former provider; a dead or unreachable one only warns."""
    if c.is_dead(provider):
        log.warning("Old provider %s is dead: consumer of %s not unregistered", provider, name)
        return
    try:
        with c.on(provider) as conn:
            unregister_subscriber(conn, c.queue, name, worker)
    except PgferryError as exc:
        log.warning("Could not unregister %s on old provider %s: %s", name, provider, exc)
