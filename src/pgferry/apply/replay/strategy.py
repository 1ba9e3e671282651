"""How one batch is replayed, decided from what its summary says and the replay settings.

:func:`choose` is the whole decision, a pure function (the one question it asks outside,
whether Spark is up, is asked only when its answer matters, as asking remembers that a large
batch wanted Spark; :func:`may_be_small` is its part asked before the summary is read,
whether the summary comes with a small batch's reads).  Its answer, a :class:`Strategy`,
only describes the ways; the objects that replay hold what they run on:

* ``small``: the whole batch in two round trips first (:class:`~.small_batch.SmallBatch`,
  made by :mod:`pgferry.apply.replay.batch`); when it declines, table by table as below;
* ``reads``: how each segment's parts are read, :meth:`Strategy.segment_reads` for a
  segment of so many parts: inline, by reader threads ahead of the apply, or by Spark
  tasks (:mod:`.part_reads`, the objects :mod:`pgferry.apply.replay.ways` hands out);
* ``apart``: the parts applied on two connections (:class:`~.two_connections.TwoConnections`)
  instead of one (:class:`~.one_connection.OneConnection`); both are a segment's
  :class:`~.one_connection.SegmentWay`, ``read`` then ``apply``;
* ``start_next``: the next batch read while this one is applied (:mod:`.prefetch`).

tests/apply/test_strategy.py holds its table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

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


# How a segment's parts are read: on the worker's provider connection, by reader threads
# ahead of the apply, or by Spark tasks.
Reads = Literal["inline", "threads", "spark"]


@dataclass(frozen=True)
class Strategy:
    """What :func:`choose` decided for every segment of a batch (a description: the
    objects that carry it out are made from it where their resources are kept)."""

    small: bool  # the whole apply in two round trips first (small_batch.py)
    reads: Reads  # how a segment's parts are read when it has several (segment_reads)
    apart: bool  # some tables may go to the second connection (two_connections.py)
    start_next: bool  # the next batch is summarised and read while this one is applied

    @property
    def spark(self) -> bool:
        return self.reads == "spark"

    @property
    def ranges(self) -> bool:
        """Large tables are planned in ev_id ranges (read in parallel)."""
        return self.reads != "inline"

    @property
    def whole_updates(self) -> bool:
        """Only tables that saw nothing but inserts are split into ranges: a Spark task
        hands its whole part to the driver, there ranges bound memory; with two applying
        connections a table in ranges starts its apply after a range."""
        return self.reads != "spark" and not self.apart

    def segment_reads(self, parts: int) -> Reads:
        """How a segment of ``parts`` planned parts is read: Spark tasks for any, threads
        only for more than one (a thread costs more than it saves), else inline."""
        if self.reads == "spark" and parts:
            return "spark"
        if self.reads != "inline" and parts > 1:
            return "threads"
        return "inline"


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
    reads: Reads = "spark" if use_spark else "threads" if read_ahead else "inline"
    return Strategy(small, reads, apart, start_next)
