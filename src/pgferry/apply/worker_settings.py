"""The replication worker's settings: the ini keys its loop reads, parsed once per start
and again on every reload into one :class:`WorkerSettings` (replay's own keys in
:class:`ReplaySettings`, which the worker hands to the replayer).  ``settings.py`` lists
the keys with their defaults for ``pgferry --ini``; the defaults here are the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pgferry.config import Config
from pgferry.errors import ConfigError
from pgferry.node import copymode, seqops
from pgferry.node.connect import local_connstr, queue_name

# Seconds between watermark reports up the cascade (watermark_period): rotation on a
# provider runs every few minutes at most, so a report every few seconds keeps it exact at
# a small cost.
WATERMARK_EVERY = 5.0
# The longest idle wait (the original's default): a tick announced by the provider ends it
# at once, so this bounds how late a change on the node itself is noticed.
LOOP_DELAY = 1.0


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
            local_max_events=config.getint("replay_local_events", 50000),
            read_parts=config.getint("replay_read_parts", 0),  # 0: Spark's parallelism
            read_ahead=config.getint("replay_read_ahead", 2),
            read_ahead_events=config.getint("replay_read_ahead_events", 2000),
            read_range_events=config.getint("replay_read_range_events", 100000),
            # Off: on two cores the merge cost what the parallel reads of the ranges
            # saved (BENCHMARKS.md); where the provider has cores to spare it can pay.
            merge_ranges=config.getbool("replay_merge_ranges", False),
            second_events=config.getint("replay_second_events", 0),
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
            loop_delay=config.getfloat("loop_delay", LOOP_DELAY),
            exception_sleep=config.getfloat("exception_sleep", 20.0),
            connection_lifetime=config.getfloat("connection_lifetime", 1200.0),
            parallel_copies=config.getint("parallel_copies", 1),
            copy_snapshot_max=copymode.parse_size(
                config.get("copy_snapshot_max", copymode.DEFAULT_SNAPSHOT_MAX)
            ),
            copy_chunk_rows=max(1, config.getint("copy_chunk_rows", copymode.DEFAULT_CHUNK_ROWS)),
            batch_min_events=config.getint(
                "pgq_batch_collect_events", config.getint("replay_batch_events", 200000)
            ),
            warm_spark=config.getbool("spark_warm", True),
            seq_buffer=seqops.seq_buffer(config),
            watermark_period=config.getfloat("watermark_period", WATERMARK_EVERY),
            keep_lag=config.getseconds("pgq_keep_lag"),
            collect_interval=config.getseconds("pgq_batch_collect_interval"),
            replay=ReplaySettings.from_config(config),
            failover_reconcile=_reconcile_mode(config),
            failover_history=config.getseconds("failover_history") or timedelta(days=1),
        )


def _reconcile_mode(config: Config) -> bool:
    """``failover_reconcile``: auto (True) or stop (False)."""
    mode = (config.get("failover_reconcile", "auto") or "auto").strip().lower()
    if mode not in ("auto", "stop"):
        raise ConfigError(
            f"{config.path}: setting 'failover_reconcile' must be auto or stop, not {mode!r}"
        )
    return mode == "auto"
