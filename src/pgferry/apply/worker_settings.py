"""The replication worker's settings: the ini keys its loop reads, parsed once per start
and again on every reload into one :class:`WorkerSettings` (replay's own keys in
:class:`ReplaySettings`, which the worker hands to the replayer).  Each key's type and
default are those :mod:`pgferry.settings` declares.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pgferry import settings
from pgferry.config import Config
from pgferry.node import seqops
from pgferry.node.connect import local_connstr, queue_name

# Seconds between watermark reports up the cascade (watermark_period): rotation on a
# provider runs every few minutes at most, so a report every few seconds keeps it exact at
# a small cost.
WATERMARK_EVERY = settings.WATERMARK_PERIOD.fixed
# The longest idle wait (the original's default): a tick announced by the provider ends it
# at once, so this bounds how late a change on the node itself is noticed.
LOOP_DELAY = settings.LOOP_DELAY.fixed


@dataclass(frozen=True)
class ReplaySettings:
    """Replay's own keys (``replay_*``): when a batch is read by Spark, by reader threads
    or inline, and in how many parts."""

    local_max_events: int  # batches estimated at most this big are replayed without Spark
    read_parts: int  # Spark tasks reading a replayed batch at once
    read_ahead: int  # provider connections reading tables ahead of the apply
    read_ahead_events: int  # smaller batches are read inline (a thread costs more)
    read_range_events: int  # larger tables are read in ev_id ranges of about this size
    merge_ranges: bool  # a table with updates too, its ranges merged on the subscriber
    second_events: int  # larger batches apply some tables on a second connection (0: off)

    @classmethod
    def from_config(cls, config: Config) -> ReplaySettings:
        return cls(
            # On 2 cores a Spark job cost 0.25-1.2 s for batches of 5-8k events that the
            # driver's readers applied in 0.05-0.1 s: Spark takes the large batches only.
            local_max_events=config.get(settings.REPLAY_LOCAL_EVENTS),
            read_parts=config.get(settings.REPLAY_READ_PARTS),  # 0: Spark's parallelism
            read_ahead=config.get(settings.REPLAY_READ_AHEAD),
            read_ahead_events=config.get(settings.REPLAY_READ_AHEAD_EVENTS),
            read_range_events=config.get(settings.REPLAY_READ_RANGE_EVENTS),
            # Off: on two cores the merge cost what the parallel reads of the ranges
            # saved (BENCHMARKS.md); where the provider has cores to spare it can pay.
            merge_ranges=config.get(settings.REPLAY_MERGE_RANGES),
            second_events=config.get(settings.REPLAY_SECOND_EVENTS),
        )


@dataclass
class WorkerSettings:
    queue: str
    local_dsn: str
    loop_delay: float
    exception_sleep: float
    connection_lifetime: float
    parallel_copies: int
    copy_snapshot_max: int  # bytes: larger tables copy in chunks (node/copymode.py)
    copy_chunk_rows: int  # rows per chunk of a chunked copy
    batch_min_events: int  # a consumer behind asks for multi-tick batches of this size
    warm_spark: bool  # start Spark in the background once caught up
    seq_buffer: int  # a root publishes its sequences this far ahead
    watermark_period: float  # seconds between watermark reports to the provider
    keep_lag: timedelta | None  # pgq_keep_lag: take only batches at least this old
    collect_interval: timedelta | None  # pgq_batch_collect_interval: minimum batch span
    replay: ReplaySettings
    failover_reconcile: bool  # a diverged provider is reconciled (auto), or stops the worker
    failover_history: timedelta  # applied ticks' records kept this long (docs/failover.md)

    @classmethod
    def from_config(cls, config: Config) -> WorkerSettings:
        return cls(
            queue=queue_name(config),
            local_dsn=local_connstr(config),
            loop_delay=config.get(settings.LOOP_DELAY),
            exception_sleep=config.get(settings.EXCEPTION_SLEEP),
            connection_lifetime=config.get(settings.CONNECTION_LIFETIME),
            parallel_copies=config.get(settings.PARALLEL_COPIES),
            copy_snapshot_max=config.get(settings.COPY_SNAPSHOT_MAX),
            copy_chunk_rows=max(1, config.get(settings.COPY_CHUNK_ROWS)),
            # replay_batch_events, the older name, is read too (settings.ALIASES).
            batch_min_events=config.get(settings.PGQ_BATCH_COLLECT_EVENTS),
            warm_spark=config.get(settings.SPARK_WARM),
            seq_buffer=seqops.seq_buffer(config),
            watermark_period=config.get(settings.WATERMARK_PERIOD),
            keep_lag=config.get(settings.PGQ_KEEP_LAG),
            collect_interval=config.get(settings.PGQ_BATCH_COLLECT_INTERVAL),
            replay=ReplaySettings.from_config(config),
            failover_reconcile=config.get(settings.FAILOVER_RECONCILE) == "auto",
            failover_history=config.get(settings.FAILOVER_HISTORY),  # 0 or empty: 1 day
        )
