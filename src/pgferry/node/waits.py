"""Waiting on ticks: ``wait-root`` / ``wait-provider`` and the waits of cascade operations.

Tick ids are the same on every node of a cascade (branches copy the root's ticks), so "node
N has caught up with tick T" is simply ``last_tick_id >= T`` on N.
"""

from __future__ import annotations

import logging

from pgferry.errors import NodeError, WaitTimeout
from pgferry.node import model
from pgferry.node.cascade import Cascade
from pgferry.polling import wait_until
from pgferry.queue import ticks as queue_ticks

log = logging.getLogger(__name__)


def queue_top(c: Cascade, name: str) -> int | None:
    """Newest tick of the queue on ``name`` (root or branch)."""
    with c.on(name, autocommit=True) as conn:
        return queue_ticks.last_tick(conn, c.queue)[0]


def applied_tick(c: Cascade, name: str) -> int | None:
    """Last tick applied on ``name`` (the root's is its queue's newest tick)."""
    view = c.view(name)
    if view.node_type == "root":
        return queue_top(c, name)
    return view.last_tick


def wait_applied(c: Cascade, name: str, tick: int, timeout: float, poll: float) -> int:
    """Poll until ``name`` has applied ``tick``; ``timeout`` <= 0 waits for ever."""
    current: int | None = None  # the last answer, for the timeout message

    def reached() -> int | None:
        nonlocal current
        current = applied_tick(c, name)
        return current if current is not None and current >= tick else None

    try:
        # A tick id is never 0, so the reached tick is a true value.
        return wait_until(reached, timeout=timeout if timeout > 0 else None, interval=poll)
    except WaitTimeout:
        raise NodeError(
            f"Node {name} did not reach tick {tick} within {timeout:g}s"
            f" (at tick {current if current is not None else '?'}; is its worker running?)"
        ) from None


def missing_tick(c: Cascade, name: str, tick: int) -> str | None:
    """Why ``name`` cannot serve a reader at ``tick`` ("no longer holds tick ..."): it holds
    ticks past it but not that tick with every event after it (rotated away, or skipped by
    a batch spanning several ticks); None when it can, or has not reached ``tick`` yet."""
    with c.on(name, autocommit=True) as conn:
        usable, oldest, top = queue_ticks.tick_standing(conn, c.queue, tick)
    return _why_missing(usable, oldest, top, tick)


def _why_missing(usable: bool, oldest: int | None, top: int | None, tick: int) -> str | None:
    if usable or top is None or top < tick:
        return None
    if oldest is not None and oldest > tick:
        return f"no longer holds tick {tick} (its oldest usable tick is {oldest})"
    return f"does not hold tick {tick} (it holds ticks {oldest} to {top})"


def wait_tick_available(c: Cascade, name: str, tick: int, timeout: float, poll: float) -> None:
    """Poll until the queue on ``name`` holds ``tick`` and every event after it (a branch
    behind catches up); fail at once when it never will."""
    top: int | None = None  # the queue's newest tick at the last look

    def held() -> bool:
        nonlocal top
        with c.on(name, autocommit=True) as conn:
            usable, oldest, top = queue_ticks.tick_standing(conn, c.queue, tick)
        reason = _why_missing(usable, oldest, top, tick)
        if reason is not None:
            raise NodeError(f"Node {name} {reason}")
        return usable

    try:
        wait_until(held, timeout=max(timeout, 0), interval=poll)
    except WaitTimeout:
        raise NodeError(
            f"Node {name} has not reached tick {tick} within {timeout:g}s"
            f" (at tick {top if top is not None else '?'})"
        ) from None


def find_root(c: Cascade) -> str:
    """Walk up the provider chain from the local node to the root."""
    name: str | None = c.local.node_name
    seen: set[str] = set()
    while name is not None and name not in seen:
        seen.add(name)
        view = c.view(name)
        if view.node_type == "root":
            return name
        name = view.provider
    raise NodeError("No root found above the local node")


def wait_root(c: Cascade, timeout: float, poll: float) -> tuple[str, int | None]:
    """Wait until the local node has applied the root's newest tick; (root, tick)."""
    root = find_root(c)
    if root == c.local.node_name:
        return root, queue_top(c, root)
    tick = queue_top(c, root)
    if tick is not None:
        log.info("Waiting for tick %s of root %s", tick, root)
        wait_applied(c, c.local.node_name, tick, timeout, poll)
    return root, tick


def wait_provider(c: Cascade, timeout: float, poll: float) -> tuple[str, int | None]:
    """Wait until the local node has applied its provider's newest tick; (provider, tick)."""
    provider = c.local.provider_node
    if provider is None:
        raise NodeError(f"Node {c.local.node_name} is the root: it has no provider")
    with c.on(provider, autocommit=True) as conn:
        node = model.require_node(conn, c.queue)
        tick = queue_ticks.last_tick(conn, c.queue)[0] if node.has_queue else None
    if tick is not None:
        log.info("Waiting for tick %s of provider %s", tick, provider)
        wait_applied(c, c.local.node_name, tick, timeout, poll)
    return provider, tick
