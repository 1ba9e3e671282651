"""How one batch is replayed, decided from what its summary says and the replay settings.

:func:`choose` is the whole decision, a pure function (the one question it asks outside,
whether Spark is up, is asked only when its answer matters, as asking remembers that a large
batch wanted Spark; :func:`may_be_small` is its part asked before the summary is read,
whether the summary comes with a small batch's reads): a small batch in two round trips
(``small``); else by Spark tasks (``use_spark``), by reader threads ahead of the apply
(``read_ahead``) or inline; some tables on a second connection (``apart``); and the next
batch read while this one is applied (``start_next``).  :mod:`pgferry.apply.batch` acts on
the answer; tests/apply/test_strategy.py holds its table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pgferry.apply.worker_settings import ReplaySettings
from pgferry.node import model
from pgferry.registry.routes import Route


@dataclass(frozen=True)
class BatchFacts:
    """What the batch's summary and the node say about it."""

    main: bool  # the node's own stream (not a copied group's catch-up)
    estimate: int | None  # its events, from the ticks' sequence values (None: unknown)
    scripts: bool  # it holds queued scripts
    removals: bool  # it holds removals of tables or sequences
    applies: bool  # some table of the batch is replayed here
    small: bool  # small enough for the two round trips (may_be_small)
    second_left: bool  # a second connection may have applied tables of it already
    read_next: bool  # the worker would read the next batch meanwhile


@dataclass(frozen=True)
class Strategy:
    small: bool  # the whole apply in two round trips (small_batch.py)
    use_spark: bool  # its parts read by Spark tasks
    read_ahead: bool  # its parts read by reader threads ahead of the apply (else inline)
    apart: bool  # some tables may go to the second connection (second_apply.py)
    start_next: bool  # the next batch is summarised and read while this one is applied


def may_be_small(
    main: bool, estimate: int | None, read_ahead_events: int, node: model.NodeInfo,
    routes: dict[str, Route],
) -> bool:  # fmt: skip
    """Whether a batch may be applied in two round trips (:mod:`.small_batch`), asked
    before its summary is read: the node's own stream, read inline, not a branch's
    (forwarding), no copy filter."""
    return (
        main
        and estimate is not None
        and estimate <= read_ahead_events
        and node.node_type != "branch"
        and not any(r.copy_snapshot for r in routes.values())
    )


def choose(
    facts: BatchFacts, settings: ReplaySettings, spark_ready: Callable[[], bool]
) -> Strategy:
    """The strategy of a batch; ``spark_ready`` is asked only for a large batch that
    applies and holds no script (it is :meth:`WorkerSpark.ready` with ``start=False``)."""
    estimate = facts.estimate
    big = estimate is None or estimate > settings.local_max_events
    # A batch never starts Spark: a JVM starting during a catch-up takes the CPU the
    # catch-up needs.  The session comes up once caught up, or for an initial copy.
    use_spark = facts.applies and not facts.scripts and big and spark_ready()
    read_ahead = estimate is None or estimate > settings.read_ahead_events
    second = settings.second_events
    apart = (
        facts.main
        and not facts.scripts
        and not facts.removals
        and not use_spark
        and second > 0
        and (estimate is None or estimate > second)
    )
    # The next batch is read meanwhile only after a large one (catching up); scripts and
    # removals change what it is read with.
    start_next = (
        facts.read_next and facts.main and read_ahead and not facts.scripts and not facts.removals
    )
    small = facts.small and not (use_spark or facts.scripts or facts.removals or facts.second_left)
    return Strategy(small, use_spark, read_ahead, apart, start_next)
