"""Waiting on ticks: ``wait-root`` / ``wait-provider`` and the waits of cascade operations.

Tick ids are the same on every node of a cascade (branches copy the root's ticks), so "node
N has caught up with tick T" is simply ``last_tick_id >= T`` on N. Events the root has not
ticked yet are in no tick: ``wait-root`` (and ``wait-provider`` on the root) waits for the
tick that takes them (also those of a transaction that committed after the newest tick was
made but had taken its event ids before: that tick's snapshot does not see them,
:func:`pgferry.queue.ticks.late_events`), and every wait fails at once, naming the ticker,
when the root's ticker counts as stopped (:mod:`.ticker_health`), instead of reporting a
tick that leaves those events out. ``wait-root`` and ``wait-provider`` also fail at once,
naming the error, when the node waited on or a node between it and the root shows one
(``ERR`` in ``status``): its worker does not apply the tick until someone acts, so the wait
would last for ever (:func:`path_error`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import datetime

import psycopg

from pgferry.config import Config
from pgferry.errors import DivergedProvider, NodeError, PgferryError, WaitTimeout
from pgferry.node import model, ticker_health
from pgferry.node.cascade import Cascade, load
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


def path_error(c: Cascade, name: str) -> str | None:
    """'Node leaf is in error: ...' when ``name`` or a node above it (not the root, whose
    worker applies nothing) shows an error; else None.  A node above that cannot be
    reached is left out: the wait's own reads say what is wrong with ``name``."""
    seen: set[str] = set()
    current: str | None = name
    while current is not None and current not in seen:
        seen.add(current)
        try:
            with c.on(current, autocommit=True) as conn:
                node = model.load_node(conn, c.queue)
                if node is None or node.node_type == "root":
                    return None
                state = model.local_state(conn, c.queue, node.worker_name)
        except (PgferryError, psycopg.Error):
            if current == name:
                raise
            return None
        if state is not None and state.cur_error:
            return f"Node {current} is in error: {state.cur_error}"
        current = node.provider_node
    return None


def wait_applied(
    c: Cascade, name: str, tick: int, timeout: float, poll: float, *, fail_on_error: bool = False
) -> int:
    """Poll until ``name`` has applied ``tick``; ``timeout`` <= 0 waits for ever.
    ``fail_on_error``: fail at once, naming it, when :func:`path_error` finds an error (the
    cascade operations leave it out: a worker that meets a changed provider records an
    error once and goes on)."""
    current: int | None = None  # the last answer, for the timeout message

    def reached() -> int | None:
        nonlocal current
        current = applied_tick(c, name)
        if current is not None and current >= tick:
            return current
        if fail_on_error:
            error = path_error(c, name)
            if error is not None:
                at = current if current is not None else "?"
                raise NodeError(f"{error} (waiting for tick {tick}, at tick {at})")
        return None

    try:
        # A tick id is never 0, so the reached tick is a true value.
        return wait_until(reached, timeout=timeout if timeout > 0 else None, interval=poll)
    except WaitTimeout:
        raise NodeError(
            f"Node {name} did not reach tick {tick} within {_seconds(timeout)}s"
            f" (at tick {current if current is not None else '?'}; is its worker running?)"
        ) from None


def _seconds(value: float) -> str:
    """4.86 -> '4.9', 120.0 -> '120' (what is left of a wait, as a person reads it)."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def missing_tick(c: Cascade, name: str, tick: int) -> str | None:
    """Why ``name`` cannot serve a reader at ``tick`` ("no longer holds tick ..."): it holds
    ticks past it but not that tick with every event after it (rotated away, or skipped by
    a batch spanning several ticks); None when it can, or has not reached ``tick`` yet."""
    with c.on(name, autocommit=True) as conn:
        usable, oldest, top = queue_ticks.tick_standing(conn, c.queue, tick)
    return _why_missing(usable, oldest, top, tick)


def diverged_tick(
    c: Cascade, name: str, tick: int, tick_time: datetime | None, reader: str
) -> DivergedProvider | None:
    """The error when ``name`` holds a tick ``tick`` made at another time than
    ``tick_time``, the time ``reader`` recorded of the tick it applied: that tick is not
    the one ``reader`` applied (``name`` failed over to a standby that lacked it), so
    ``reader`` cannot go on from it (docs/failover.md).  None when it is the same tick, or
    a time is unknown (a position recorded before times were compared)."""
    if tick_time is None:
        return None
    with c.on(name, autocommit=True) as conn:
        found = queue_ticks.tick_time(conn, c.queue, tick)
    if found is None or found == tick_time:
        return None
    return DivergedProvider(
        f"Diverged provider: {reader} applied tick {tick} made at {tick_time}, but node {name}'s"
        f" tick {tick} was made at {found}: it lost ticks {reader} applied (failover to a"
        " standby that lacked them); see docs/failover.md"
    )


def _why_missing(usable: bool, oldest: int | None, top: int | None, tick: int) -> str | None:
    if usable or top is None or top < tick:
        return None
    if oldest is not None and oldest > tick:
        return f"no longer holds tick {tick} (its oldest usable tick is {oldest})"
    # Between its oldest and newest tick a node lacks the ticks one of its batches spanned
    # (it read past them from its provider in one go): the tick never was in its queue.
    return (
        f"does not hold tick {tick}: it read past that tick of its provider in one batch"
        f" (it holds some of ticks {oldest} to {top}, not that one)"
    )


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


# Seconds a running ticker takes at most to tick events that wait: its idle round
# (ticker_period, 1 s by default) and the queue's ticker_max_lag, with room to spare.
TICKER_ROUND = 2.0


def _ticker(c: Cascade, root: str) -> ticker_health.TickerReading | None:
    with c.on(root, autocommit=True) as conn:
        return ticker_health.read(conn, c.queue)


def _check_far_root(c: Cascade) -> None:
    """Fail, naming the ticker, when the root (not the node waited on) counts as stopped;
    a root that cannot be reached is not this wait's business."""
    try:
        root = find_root(c)
        reading = _ticker(c, root)
    except (PgferryError, psycopg.Error) as exc:
        log.debug("root's ticker not looked at: %s", exc)
        return
    if reading is not None and reading.stopped(ticker_health.stopped_after(c.config)):
        raise NodeError(_capital(reading.line(root)))


def _capital(line: str) -> str:
    return line[:1].upper() + line[1:]


def _left(deadline: float | None) -> float:
    """What is left of a wait as a ``timeout`` argument (<= 0 waits for ever)."""
    return 0.0 if deadline is None else max(deadline - time.monotonic(), 0.001)


def root_tick(c: Cascade, root: str, deadline: float | None, poll: float) -> int | None:
    """The root's tick that takes every event committed there now: its newest tick, or
    while events wait for a tick, the next one (waited for until ``deadline``; None: for
    ever).  Fails, naming the ticker, when it counts as stopped."""
    first = _ticker(c, root)
    if first is None:  # frozen by a switchover, or no queue: its newest tick is final
        return queue_top(c, root)
    if first.last_tick is None:
        return None
    if not first.waiting:
        # No event after the tick's position, but a transaction running when the tick was
        # made may have committed since: its events wait for the next tick all the same.
        with c.on(root, autocommit=True) as conn:
            late = queue_ticks.late_events(conn, c.queue, first.last_tick)
        if not late:
            return first.last_tick
        first = replace(first, waiting=late)
    before = first.last_tick
    # Events that came just now to a queue idle for long look like a stopped ticker
    # until its next round: it is judged only after that round's time.
    judged_at = time.monotonic() + TICKER_ROUND

    def ticked() -> int | None:
        now = _ticker(c, root)
        if now is None or now.last_tick is None:
            return queue_top(c, root)
        if now.last_tick > before:
            return now.last_tick
        if not now.waiting:  # late commits are not counted in the queue's figures
            now = replace(now, waiting=first.waiting)
        if time.monotonic() >= judged_at and now.stopped(ticker_health.stopped_after(c.config)):
            raise NodeError(_capital(now.line(root)))
        return None

    log.info("Waiting for root %s to tick %d waiting events", root, first.waiting)
    try:
        return wait_until(
            ticked, timeout=None if deadline is None else _left(deadline), interval=poll
        )
    except WaitTimeout:
        raise NodeError(
            f"Root {root} made no tick for the {first.waiting} events waiting there:"
            f" {ticker_health.REMEDY}"
        ) from None


def wait_root(c: Cascade, timeout: float, poll: float) -> tuple[str, int | None]:
    """Wait until the local node has applied every event committed on the root when
    called (the root's newest tick, or the next one while events wait); (root, tick)."""
    deadline = time.monotonic() + timeout if timeout > 0 else None
    root = find_root(c)
    tick = root_tick(c, root, deadline, poll)
    if root == c.local.node_name:
        return root, tick
    if tick is not None:
        log.info("Waiting for tick %s of root %s", tick, root)
        wait_applied(c, c.local.node_name, tick, _left(deadline), poll, fail_on_error=True)
    return root, tick


def wait_provider(c: Cascade, timeout: float, poll: float) -> tuple[str, int | None]:
    """Wait until the local node has applied its provider's newest tick (on the root,
    every event committed there when called, as :func:`wait_root`); (provider, tick)."""
    deadline = time.monotonic() + timeout if timeout > 0 else None
    provider = c.local.provider_node
    if provider is None:
        raise NodeError(f"Node {c.local.node_name} is the root: it has no provider")
    with c.on(provider, autocommit=True) as conn:
        node = model.require_node(conn, c.queue)
        tick = queue_ticks.last_tick(conn, c.queue)[0] if node.has_queue else None
    if node.is_root:
        tick = root_tick(c, provider, deadline, poll)
    else:
        _check_far_root(c)  # a branch's ticks come from the root's ticker
    if tick is not None:
        log.info("Waiting for tick %s of provider %s", tick, provider)
        wait_applied(c, c.local.node_name, tick, _left(deadline), poll, fail_on_error=True)
    return provider, tick


class RootTicker:
    """For a long wait (``wait-sync``): fails, naming the ticker, once the root's ticker
    counts as stopped.  Looks at most every ``ticker_health.CHECK_EVERY`` seconds, walking
    the cascade up to the root each time (a takeover may have moved it).  A root that
    cannot be reached is not the wait's business: the wait goes on as it did."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._looked_at = float("-inf")

    def check(self, *, now: bool = False) -> None:
        """Look when a look is due; ``now``: whenever (before the wait reports success,
        which a stopped ticker makes untrue: the node's tables stop following the root)."""
        every = min(ticker_health.CHECK_EVERY, ticker_health.stopped_after(self.config))
        if not now and time.monotonic() - self._looked_at < every:
            return
        self._looked_at = time.monotonic()
        try:
            cascade = load(self.config)
        except (PgferryError, psycopg.Error):
            return  # the wait's own reads say what is wrong with the node
        _check_far_root(cascade)
