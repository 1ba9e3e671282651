"""The worker-down rule's figures are the worker's own: its idle heartbeat period, a root's
longest idle wait and the defaults of ``exception_sleep`` and ``loop_delay`` (the rule sits
below ``apply/`` and cannot import them)."""

from __future__ import annotations

import pytest

from pgferry import settings
from pgferry.apply import idle, worker_settings
from pgferry.node import worker_health

pytestmark = pytest.mark.pure


def test_rule_uses_the_workers_figures() -> None:
    assert worker_health.HEARTBEAT_EVERY == idle.HEARTBEAT_EVERY
    assert worker_health.ROOT_BACKOFF == idle.ROOT_BACKOFF
    assert worker_health.LOOP_DELAY == worker_settings.LOOP_DELAY
    assert settings.EXCEPTION_SLEEP.fixed == worker_health.EXCEPTION_SLEEP
    assert settings.LOOP_DELAY.fixed == worker_health.LOOP_DELAY
    assert worker_health.down_after(None) == 30.0


def test_down_and_silent() -> None:
    never = worker_health.WorkerReading(None, None)
    assert not never.down(30) and not never.silent(30)  # never ran: being set up
    dead = worker_health.WorkerReading(31.0, None)
    assert dead.down(30) and not dead.silent(30)
    assert dead.line() == "no heartbeat for 31s and no session holds the node's lock"
    retrying = worker_health.WorkerReading(12.0, None)  # waiting exception_sleep
    assert not retrying.down(30)
    long_batch = worker_health.WorkerReading(125.0, 4242)
    assert not long_batch.down(30) and long_batch.silent(118)
    assert long_batch.line().startswith("no heartbeat for 2m05s, its lock held by server pid 4242")
