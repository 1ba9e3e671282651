"""Every setting pgferry reads from an ini file, declared once: its type, its default, its comment.

Each setting is a :class:`Setting` constant (``settings.LOG_SIZE``) with a :class:`Kind` (how
its text is parsed: int, float, bool, str, size, duration, choice, list, path, port), a
default of that type (or :data:`REQUIRED`, or a :class:`Derived` default computed from the
config, like ``compare_wait`` from ``lock_timeout``) and the comment ``pgferry --ini``
prints.  A reader asks the config for the constant (``config.get(settings.LOG_SIZE)``) and
gets the declared type with the declared default: no reader has a default of its own.  A
setting read from a config of the other section (a ticker key from a node's ini) is a
programming error, raised at once.

:data:`NODE_SETTINGS` and :data:`TICKER_SETTINGS` list each section's settings in the
order ``--ini`` prints them; :func:`check` runs when a config is loaded: a key listed in
:data:`REFUSED` (a setting of the original tools that pgferry does not take) gets a warning
saying why it is ignored, and a key nobody reads gets a warning naming it, so a typo never
passes silently.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class BadValue(ValueError):
    """A setting's text is not a value of its kind; the message ends "must be ..."."""


# --- kinds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind(Generic[T]):
    """How a setting's text becomes its value (``parse`` raises :class:`BadValue`) and how a
    default is written in the ``--ini`` template (``show``)."""

    name: str
    parse: Callable[[str], T]
    show: Callable[[T], str]


def _int(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise BadValue(f"must be an integer, not {raw!r}") from None


def _float(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise BadValue(f"must be a number, not {raw!r}") from None


def _number(value: float) -> str:
    return f"{value:g}"


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_bool(raw: str) -> bool:
    """True or False of ``raw`` (1/0, true/false, yes/no, on/off; empty: False)."""
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise BadValue(f"must be true or false, not {raw!r}")


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?[bB]?)\s*")
_SIZE_UNITS = {"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def parse_size(raw: str) -> int:
    """Bytes of a size such as ``10GB``, ``512MB``, ``0`` (units of 1024)."""
    match = _SIZE.fullmatch(raw or "")
    if not match:
        raise BadValue(f"must be a size like 10GB, 512MB or 0, not {raw!r}")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()])


def _show_size(value: int) -> str:
    for unit in ("TB", "GB", "MB", "KB"):
        if value and value % _SIZE_UNITS[unit] == 0:
            return f"{value // _SIZE_UNITS[unit]}{unit}"
    return str(value)


_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)?")
_SPAN_UNITS = (
    (("ms", "msec", "millisecond", "milliseconds"), 0.001),
    (("s", "sec", "secs", "second", "seconds"), 1.0),
    (("m", "min", "mins", "minute", "minutes"), 60.0),
    (("h", "hour", "hours"), 3600.0),
    (("d", "day", "days"), 86400.0),
)


def _duration(raw: str) -> timedelta | None:
    """A time span: seconds (``30``, ``1.5``) or a number and a unit (``10s``, ``5 min``,
    ``2 hours``); None when empty."""
    text = raw.strip()
    if not text:
        return None
    match = _SPAN.fullmatch(text.lower())
    unit = (match.group(2) or "s") if match else ""
    factor = next((f for names, f in _SPAN_UNITS if unit in names), None)
    if match is None or factor is None:
        raise BadValue(f"must be a time span like 30, 10s, 5 min or 2 hours, not {raw!r}")
    return timedelta(seconds=float(match.group(1)) * factor)


def _span(raw: str) -> timedelta:
    found = _duration(raw)
    if found is None:
        raise BadValue(f"must be a time span like 30, 10s, 5 min or 2 hours, not {raw!r}")
    return found


def _show_duration(value: timedelta | None) -> str:
    if value is None:
        return ""
    seconds = value.total_seconds()
    for unit, length in (("day", 86400), ("hour", 3600), ("min", 60)):
        if seconds and seconds % length == 0:
            count = int(seconds // length)
            return f"{count} {unit}{'s' if count > 1 and unit != 'min' else ''}"
    return _number(seconds)


def _list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _path(raw: str) -> Path | None:
    # ~ is expanded when the file is read (config.PATH_KEYS).
    return Path(raw) if raw else None


def _port(raw: str) -> int | None:
    text = raw.strip()
    if not text:
        return None
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise BadValue(f"must be a port number (1-65535), not {text!r}")
    return port


def choice(*names: str) -> Kind[str]:
    """One of ``names``, any case; empty: the first one."""

    def parse(raw: str) -> str:
        low = raw.strip().lower() or names[0]
        if low not in names:
            raise BadValue(f"must be {' or '.join(names)}, not {low!r}")
        return low

    return Kind(f"choice({', '.join(names)})", parse, str)


STR: Kind[str] = Kind("str", str, str)
INT: Kind[int] = Kind("int", _int, str)
FLOAT: Kind[float] = Kind("float", _float, _number)
BOOL: Kind[bool] = Kind("bool", parse_bool, lambda v: "true" if v else "false")
SIZE: Kind[int] = Kind("size", parse_size, _show_size)
DURATION: Kind[timedelta | None] = Kind("duration", _duration, _show_duration)  # empty: None
SPAN: Kind[timedelta] = Kind("span", _span, _show_duration)  # a duration always given
LIST: Kind[tuple[str, ...]] = Kind("list", _list, ", ".join)
PATH: Kind[Path | None] = Kind("path", _path, lambda v: "" if v is None else str(v))
PORT: Kind[int | None] = Kind("port", _port, lambda v: "" if v is None else str(v))


# --- settings ------------------------------------------------------------------------------


class Config(Protocol):
    """What a derived default reads (pgferry.config.Config, which imports this module)."""

    @property
    def path(self) -> Path: ...

    def has(self, key: str) -> bool: ...

    def get(self, setting: Setting[T]) -> T: ...


class Required:
    """The default of a setting every config must give."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = Required()


@dataclass(frozen=True)
class Derived(Generic[T]):
    """A default computed from the rest of the config (``shown`` in the ``--ini`` template)."""

    shown: str
    compute: Callable[[Config], T]


@dataclass(frozen=True, eq=False)
class Setting(Generic[T]):
    """One ini key: its kind, its typed default and its ``--ini`` comment; ``shown`` writes
    the default in the template where the kind's own way would not (``1.0``, ``off``)."""

    key: str
    kind: Kind[T]
    default: T | Required | Derived[T]
    comment: str
    shown: str | None = None
    # Whether a value as written reads as the default all the same (an empty address).
    default_when: Callable[[str], bool] | None = None
    # Written in the template uncommented, for the operator to fill in (as a required one).
    ask: bool = False

    @property
    def default_text(self) -> str | None:
        """The default as the template writes it; None for a required setting."""
        if self.shown is not None:
            return self.shown
        if isinstance(self.default, Required):
            return None
        if isinstance(self.default, Derived):
            return self.default.shown
        return self.kind.show(self.default)

    @property
    def fixed(self) -> T:
        """The default of a setting that has one of its own (neither required nor derived),
        for code that runs without a config."""
        default = self.default
        if isinstance(default, (Required, Derived)):
            raise TypeError(f"setting '{self.key}' has no default value of its own")
        return default

    def parse(self, raw: str) -> T:
        return self.kind.parse(raw)


def from_values(values: Mapping[str, str], setting: Setting[T]) -> T:
    """``setting`` read from a config's values rather than the config, by code that is
    also handed ``--set`` values without an ini (the Spark pipeline, diff); BadValue for a
    bad value."""
    raw = values.get(setting.key)
    if raw is None or (setting.default_when and setting.default_when(raw)):
        return setting.fixed
    return setting.parse(raw)


def _blank(raw: str) -> bool:
    return not raw.strip()


def _no_span(raw: str) -> bool:
    return not _duration(raw)  # empty, or a span of 0


def _compare_wait(config: Config) -> float:
    # lock_timeout when it is set; else 60 s, not lock_timeout's own default of 10: a
    # compare waits for the worker's next loop (docs/replication.md).
    return config.get(LOCK_TIMEOUT) if config.has(LOCK_TIMEOUT.key) else 60.0


def _job_name(config: Config) -> str:
    return config.path.stem


# The node's settings, in the template's order.
JOB_NAME = Setting(
    "job_name", STR, Derived("(file name without .ini)", _job_name),
    "worker and consumer name (default: file name)",
)  # fmt: skip
DB = Setting("db", STR, REQUIRED, "libpq connect string of the local database (required)")
QUEUE_NAME = Setting("queue_name", STR, REQUIRED, "queue (cascade) name, e.g. replika (required)")
LOGFILE = Setting("logfile", PATH, None, "log file, e.g. ~/log/%(job_name)s.log")
LOG_SIZE = Setting("log_size", INT, 10485760, "bytes after which the log file is rotated")
LOG_COUNT = Setting("log_count", INT, 3, "rotated log files kept")
LOG_FORMAT = Setting(
    "log_format", choice("text", "json"), "text",
    "text, or json: one JSON object per line for log shippers",
)  # fmt: skip
SYSLOG = Setting("syslog", BOOL, False, "also send log lines to syslog / the journal (/dev/log)")
PIDFILE = Setting("pidfile", PATH, None, "pid file, needed by -d / -s / -r / -k")
NODE_NAME = Setting("node_name", STR, "", "default NODE for create-root/branch/leaf")
PUBLIC_NODE_LOCATION = Setting(
    "public_node_location", STR, "", "default public connect string for create-*"
)
INITIAL_PROVIDER_LOCATION = Setting(
    "initial_provider_location", STR, "", "default --provider for create-branch/leaf"
)
REMOTE_EXTRA_CONNSTR = Setting(
    "remote_extra_connstr", STR, "", "appended to other nodes' connect strings (user=, sslmode=)"
)
PARALLEL_COPIES = Setting("parallel_copies", INT, 1, "tables copied at the same time")
COPY_SNAPSHOT_MAX = Setting(
    "copy_snapshot_max", SIZE, 10 << 30,
    "larger tables that can be copy in key-range chunks, no long snapshot (0: all)",
)  # fmt: skip
COPY_CHUNK_ROWS = Setting("copy_chunk_rows", INT, 100000, "rows per chunk of a chunked copy")
SEQ_BUFFER = Setting(
    "seq_buffer", INT, 10000, "values the root publishes its sequences ahead of use"
)
LOCAL_ONLY = Setting(
    "local_only", BOOL, True,
    "always so: a leaf reads only its own tables' events (filtered on the provider)",
)  # fmt: skip
LOCK_TIMEOUT = Setting(
    "lock_timeout", FLOAT, 10.0, "seconds: statement timeout of admin locks, compare wait limit"
)
COMPARE_WAIT = Setting(
    "compare_wait", FLOAT, Derived("(lock_timeout)", _compare_wait),
    "seconds compare/repair wait for the worker's tick",
)  # fmt: skip
LOOP_DELAY = Setting(
    "loop_delay", FLOAT, 1.0, "longest idle wait; a new tick wakes a subscriber at once",
    shown="1.0",
)  # fmt: skip
EXCEPTION_SLEEP = Setting(
    "exception_sleep", FLOAT, 20.0, "seconds to wait after an error before retrying"
)
WATERMARK_PERIOD = Setting(
    "watermark_period", FLOAT, 5.0, "seconds between reports of what this subtree still needs"
)
TICKER_STOPPED_AFTER = Setting(
    "ticker_stopped_after", FLOAT, 10.0,
    "seconds without a root tick while events wait: the ticker counts as stopped",
)  # fmt: skip
CONNECTION_LIFETIME = Setting(
    "connection_lifetime", FLOAT, 1200.0, "seconds before a database connection is reopened"
)
PGQ_BATCH_COLLECT_EVENTS = Setting(
    "pgq_batch_collect_events", INT, 200000, "events per multi-tick batch when catching up"
)
PGQ_BATCH_COLLECT_INTERVAL = Setting(
    "pgq_batch_collect_interval", DURATION, None, "minimum time span per batch (10s, 5 min, ...)"
)
PGQ_KEEP_LAG = Setting(
    "pgq_keep_lag",
    DURATION,
    None,
    "only take batches at least this old: a delayed replica (1 hour)",
)
FAILOVER_RECONCILE = Setting(
    "failover_reconcile", choice("auto", "stop"), "auto",
    "provider failed over and lost ticks applied here: auto repairs, stop waits for the DBA",
)  # fmt: skip
FAILOVER_HISTORY = Setting(
    "failover_history", SPAN, timedelta(days=1),
    "how long applied ticks are recorded to reconcile a failover", default_when=_no_span,
)  # fmt: skip
COMPARE_FMT = Setting(
    "compare_fmt", STR, "%(cnt)d rows, checksum=%(chksum)s", "format of compare's lines"
)
REPLAY_LOCAL_EVENTS = Setting(
    "replay_local_events", INT, 50000, "larger batches are read by Spark when it is up"
)
REPLAY_READ_AHEAD = Setting(
    "replay_read_ahead", INT, 2, "provider connections reading tables ahead of the apply"
)
REPLAY_READ_AHEAD_EVENTS = Setting(
    "replay_read_ahead_events", INT, 2000, "smaller batches are read without reader threads"
)
REPLAY_READ_RANGE_EVENTS = Setting(
    "replay_read_range_events", INT, 100000, "larger tables are read in ev_id ranges of this size"
)
REPLAY_MERGE_RANGES = Setting(
    "replay_merge_ranges", BOOL, False, "a table with updates is read in ranges too, merged here",
    shown="off",
)  # fmt: skip
REPLAY_READ_PARTS = Setting(
    "replay_read_parts", INT, 0, "Spark tasks reading one batch at once (0: Spark's slots)"
)
REPLAY_SECOND_EVENTS = Setting(
    "replay_second_events", INT, 0, "larger batches apply tables on two connections (0: off)"
)
METRICS_PORT = Setting(
    "metrics_port", PORT, None, "serve Prometheus /metrics on this port (off when empty)"
)
METRICS_ADDRESS = Setting(
    "metrics_address",
    STR,
    "127.0.0.1",
    "address the /metrics server listens on",
    default_when=_blank,
)
HANDLER_MODULES = Setting(
    "handler_modules", LIST, (), "comma-separated Python modules with more table handlers"
)
OBFUSCATOR_MAP = Setting(
    "obfuscator_map", STR, "", "obfuscate handler: YAML rule file (unless map= is given)"
)
OBFUSCATOR_KEY = Setting(
    "obfuscator_key", STR, "", "obfuscate handler: HMAC key (secret: never printed)"
)
LAKE_PATH = Setting(
    "lake_path", STR, "", "lake handler: directory or s3://bucket/prefix of the lake's tables"
)
LAKE_S3_ENDPOINT = Setting(
    "lake_s3_endpoint", STR, "", "lake on S3: endpoint URL (default: AWS_ENDPOINT_URL, or AWS)"
)
LAKE_S3_REGION = Setting(
    "lake_s3_region", STR, "", "lake on S3: region (default: AWS_REGION / AWS_DEFAULT_REGION)"
)
LAKE_S3_ACCESS_KEY_ID = Setting(
    "lake_s3_access_key_id", STR, "", "lake on S3: access key (default: AWS_ACCESS_KEY_ID)"
)
LAKE_S3_SECRET_ACCESS_KEY = Setting(
    "lake_s3_secret_access_key", STR, "",
    "lake on S3: secret key (secret: never printed; default: AWS_SECRET_ACCESS_KEY)",
)  # fmt: skip
LAKE_S3_SESSION_TOKEN = Setting(
    "lake_s3_session_token", STR, "", "lake on S3: session token (secret; AWS_SESSION_TOKEN)"
)
LAKE_S3_ALLOW_HTTP = Setting(
    "lake_s3_allow_http", STR, "",
    "lake on S3: allow an http:// endpoint (AWS_ALLOW_HTTP; on for an http:// endpoint)",
)  # fmt: skip
LAKE_TIMEOUT = Setting(
    "lake_timeout",
    INT,
    60,
    "lake on object storage: seconds one request may take",
    default_when=_blank,
)
LAKE_CATALOG = Setting(
    "lake_catalog", STR, "",
    "Iceberg lake on object storage: the catalog's local SQLite file"
    " (default: CONFIG_DIR/JOB_iceberg_catalog.db)",
)  # fmt: skip
LAKE_FORMAT = Setting(
    "lake_format", STR, "delta", "lake handler: delta or iceberg (handler arg format= per table)"
)
LAKE_COMPACT_INTERVAL = Setting(
    "lake_compact_interval", INT, 0, "lake handler: commits between compactions (0: never)"
)
LAKE_KEEP_HOURS = Setting(
    "lake_keep_hours", INT, 168, "lake handler: hours of history a vacuum keeps"
)
LAKE_ICEBERG_DELETES = Setting(
    "lake_iceberg_deletes", choice("merge-on-read", "copy-on-write"), "merge-on-read",
    "Iceberg: a batch's changed rows rewritten with their files (copy-on-write) or"
    " deleted by position delete files (merge-on-read)",
)  # fmt: skip
SPARK_WARM = Setting(
    "spark_warm", BOOL, True, "start Spark once caught up after batches too large for the driver"
)
SPARK_IDLE_TIMEOUT = Setting(
    "spark_idle_timeout", FLOAT, 60.0, "seconds an unused worker Spark session stays up (0: always)"
)
SPARK_MASTER = Setting(
    "spark_master",
    STR,
    "local[*]",
    "Spark master for copy / replay / compare jobs",
    default_when=_blank,
)
SPARK_WAIT = Setting(
    "spark_wait",
    FLOAT,
    120.0,
    "seconds a job waits for its first executor on a cluster",
    default_when=_blank,
)
# Empty: the Spark pipeline asks the master's host (pipeline/spark_cluster.py).
SPARK_MASTER_UI = Setting(
    "spark_master_ui", STR, "", "standalone master's web UI: who holds the cores",
    shown="(master host):8080",
)  # fmt: skip
SPARK_REMOTE = Setting(
    "spark_remote", STR, "", "Spark Connect server (sc://host:15002) for compare, repair, diff"
)
# Stands for every spark.* key, all handed to the SparkSession (Config.spark_settings).
SPARK_ANY = Setting(
    "spark.executor.memory", STR, "", "any spark.* key is passed to the SparkSession"
)

NODE_SETTINGS: tuple[Setting[Any], ...] = (
    JOB_NAME, DB, QUEUE_NAME, LOGFILE, LOG_SIZE, LOG_COUNT, LOG_FORMAT, SYSLOG, PIDFILE,
    NODE_NAME, PUBLIC_NODE_LOCATION, INITIAL_PROVIDER_LOCATION, REMOTE_EXTRA_CONNSTR,
    PARALLEL_COPIES, COPY_SNAPSHOT_MAX, COPY_CHUNK_ROWS, SEQ_BUFFER, LOCAL_ONLY, LOCK_TIMEOUT,
    COMPARE_WAIT, LOOP_DELAY, EXCEPTION_SLEEP, WATERMARK_PERIOD, TICKER_STOPPED_AFTER,
    CONNECTION_LIFETIME, PGQ_BATCH_COLLECT_EVENTS, PGQ_BATCH_COLLECT_INTERVAL, PGQ_KEEP_LAG,
    FAILOVER_RECONCILE, FAILOVER_HISTORY, COMPARE_FMT, REPLAY_LOCAL_EVENTS, REPLAY_READ_AHEAD,
    REPLAY_READ_AHEAD_EVENTS, REPLAY_READ_RANGE_EVENTS, REPLAY_MERGE_RANGES, REPLAY_READ_PARTS,
    REPLAY_SECOND_EVENTS, METRICS_PORT, METRICS_ADDRESS, HANDLER_MODULES, OBFUSCATOR_MAP,
    OBFUSCATOR_KEY, LAKE_PATH, LAKE_S3_ENDPOINT, LAKE_S3_REGION, LAKE_S3_ACCESS_KEY_ID,
    LAKE_S3_SECRET_ACCESS_KEY, LAKE_S3_SESSION_TOKEN, LAKE_S3_ALLOW_HTTP, LAKE_TIMEOUT,
    LAKE_CATALOG, LAKE_FORMAT, LAKE_COMPACT_INTERVAL, LAKE_KEEP_HOURS, LAKE_ICEBERG_DELETES,
    SPARK_WARM, SPARK_IDLE_TIMEOUT, SPARK_MASTER, SPARK_WAIT, SPARK_MASTER_UI, SPARK_REMOTE,
    SPARK_ANY,
)  # fmt: skip

# The ticker's settings ([pgqd]); those of the same key as a node's are the same object
# where they mean the same.
BASE_CONNSTR = Setting(
    "base_connstr",
    STR,
    "",
    "connect string without dbname (empty: libpq's defaults, PG*)",
    ask=True,
)
INITIAL_DATABASE = Setting("initial_database", STR, "template1", "database used to list the others")
DATABASE_LIST = Setting(
    "database_list", LIST, (), "comma-separated databases; empty = every database with the queue"
)
TICKER_LOGFILE = Setting("logfile", PATH, None, "log file")
TICKER_PERIOD = Setting(
    "ticker_period", FLOAT, 1.0, "seconds between ticker runs while no event waits"
)
TICKER_BUSY_PERIOD = Setting(
    "ticker_busy_period", FLOAT, 0.005, "seconds between ticker runs while events wait"
)
TICKER_RECENT_PERIOD = Setting(
    "ticker_recent_period", FLOAT, 0.05,
    "seconds between ticker runs for ticker_recent_time after events were last seen",
)  # fmt: skip
TICKER_RECENT_TIME = Setting(
    "ticker_recent_time", FLOAT, 10.0,
    "seconds after the last events during which runs are that often",
)  # fmt: skip
MAINT_PERIOD = Setting("maint_period", FLOAT, 120.0, "seconds between maintenance runs (rotation)")
RETRY_PERIOD = Setting("retry_period", FLOAT, 30.0, "seconds between moving due retry events back")
CHECK_PERIOD = Setting("check_period", FLOAT, 60.0, "seconds between looking for new databases")
STATS_PERIOD = Setting("stats_period", FLOAT, 30.0, "seconds between statistics lines in the log")
TICKER_CONNECTION_LIFETIME = Setting(
    "connection_lifetime", FLOAT, 3600.0, "seconds before a database connection is reopened"
)

TICKER_SETTINGS: tuple[Setting[Any], ...] = (
    BASE_CONNSTR, INITIAL_DATABASE, DATABASE_LIST, TICKER_LOGFILE, LOG_SIZE, LOG_COUNT,
    LOG_FORMAT, SYSLOG, PIDFILE, TICKER_PERIOD, TICKER_BUSY_PERIOD, TICKER_RECENT_PERIOD,
    TICKER_RECENT_TIME, MAINT_PERIOD, RETRY_PERIOD, CHECK_PERIOD, STATS_PERIOD,
    TICKER_CONNECTION_LIFETIME, METRICS_PORT, METRICS_ADDRESS,
)  # fmt: skip

# Read by pgferry but not advertised: the older name of a setting.
ALIASES = {"replay_batch_events": PGQ_BATCH_COLLECT_EVENTS}

# Names every config has (interpolation defaults), never written by hand.
BUILTINS = {"job_name", "service_name", "config_dir", "config_file", "host_name"}

# Settings of the original that pgferry does not take: a warning says why, once.
REFUSED = {
    "compare_sql": "compare hashes key ranges of both sides at one tick and applies each"
    " table's copy condition itself; a custom compare query is not used",
}

# Settings no module asks the config for, on purpose: read by the ini's reader itself
# (every spark.* key goes to Spark as it is), or taken for the original's sake only.
NOT_READ = {
    SPARK_ANY: "every spark.* key is handed to the SparkSession by Config.spark_settings",
    LOCAL_ONLY: "a leaf always reads only its own tables' events; the key is accepted as is",
}


def schema(ticker: bool) -> tuple[Setting[Any], ...]:
    return TICKER_SETTINGS if ticker else NODE_SETTINGS


def known_keys(ticker: bool) -> set[str]:
    return {s.key for s in schema(ticker)} | set(ALIASES) | BUILTINS


def check(path: Path, section: str, keys: list[str], ticker: bool) -> None:
    """Name the settings pgferry does not take, and the keys it does not know."""
    for key in keys:
        if key in REFUSED and not ticker:
            log.warning("%s: setting '%s' is ignored: %s", path, key, REFUSED[key])
    known = known_keys(ticker) | set(REFUSED)
    for key in keys:
        if key not in known and not key.startswith("spark."):
            log.warning("%s: unknown setting '%s' in [%s] (ignored)", path, key, section)
