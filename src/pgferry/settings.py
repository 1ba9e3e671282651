"""Every setting pgferry reads from an ini file: the one list behind ``--ini`` and the checks.

``pgferry --ini`` prints these with their defaults and comments; :func:`check` runs when a
config is loaded: a key listed in :data:`REFUSED` (a setting of the original tools that
pgferry does not take) gets a warning saying why it is ignored, and a key nobody reads gets
a warning naming it, so a typo never passes silently.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

# (key, default or None when required, comment); "" default means "no value by default".
Setting = tuple[str, str | None, str]

NODE_SETTINGS: list[Setting] = [
    ("job_name", "(file name without .ini)", "worker and consumer name (default: file name)"),
    ("db", None, "libpq connect string of the local database (required)"),
    ("queue_name", None, "queue (cascade) name, e.g. replika (required)"),
    ("logfile", "", "log file, e.g. ~/log/%(job_name)s.log"),
    ("log_size", "10485760", "bytes after which the log file is rotated"),
    ("log_count", "3", "rotated log files kept"),
    ("log_format", "text", "text, or json: one JSON object per line for log shippers"),
    ("syslog", "false", "also send log lines to syslog / the journal (/dev/log)"),
    ("pidfile", "", "pid file, needed by -d / -s / -r / -k"),
    ("node_name", "", "default NODE for create-root/branch/leaf"),
    ("public_node_location", "", "default public connect string for create-*"),
    ("initial_provider_location", "", "default --provider for create-branch/leaf"),
    ("remote_extra_connstr", "", "appended to other nodes' connect strings (user=, sslmode=)"),
    ("parallel_copies", "1", "tables copied at the same time"),
    (
        "copy_snapshot_max",
        "10GB",
        "larger tables that can be copy in key-range chunks, no long snapshot (0: all)",
    ),
    ("copy_chunk_rows", "100000", "rows per chunk of a chunked copy"),
    ("seq_buffer", "10000", "values the root publishes its sequences ahead of use"),
    (
        "local_only",
        "true",
        "always so: a leaf reads only its own tables' events (filtered on the provider)",
    ),
    ("lock_timeout", "10", "seconds: statement timeout of admin locks, compare wait limit"),
    ("compare_wait", "(lock_timeout)", "seconds compare/repair wait for the worker's tick"),
    ("loop_delay", "1.0", "longest idle wait; a new tick wakes a subscriber at once"),
    ("exception_sleep", "20", "seconds to wait after an error before retrying"),
    ("watermark_period", "5", "seconds between reports of what this subtree still needs"),
    (
        "ticker_stopped_after",
        "10",
        "seconds without a root tick while events wait: the ticker counts as stopped",
    ),
    ("connection_lifetime", "1200", "seconds before a database connection is reopened"),
    ("pgq_batch_collect_events", "200000", "events per multi-tick batch when catching up"),
    ("pgq_batch_collect_interval", "", "minimum time span per batch (10s, 5 min, ...)"),
    ("pgq_keep_lag", "", "only take batches at least this old: a delayed replica (1 hour)"),
    (
        "failover_reconcile",
        "auto",
        "provider failed over and lost ticks applied here: auto repairs, stop waits for the DBA",
    ),
    ("failover_history", "1 day", "how long applied ticks are recorded to reconcile a failover"),
    ("compare_fmt", "%(cnt)d rows, checksum=%(chksum)s", "format of compare's lines"),
    ("replay_local_events", "50000", "larger batches are read by Spark when it is up"),
    ("replay_read_ahead", "2", "provider connections reading tables ahead of the apply"),
    ("replay_read_ahead_events", "2000", "smaller batches are read without reader threads"),
    ("replay_read_range_events", "100000", "larger tables are read in ev_id ranges of this size"),
    ("replay_merge_ranges", "off", "a table with updates is read in ranges too, merged here"),
    ("replay_read_parts", "0", "Spark tasks reading one batch at once (0: Spark's slots)"),
    ("replay_second_events", "0", "larger batches apply tables on two connections (0: off)"),
    ("metrics_port", "", "serve Prometheus /metrics on this port (off when empty)"),
    ("metrics_address", "127.0.0.1", "address the /metrics server listens on"),
    ("handler_modules", "", "comma-separated Python modules with more table handlers"),
    ("obfuscator_map", "", "obfuscate handler: YAML rule file (unless map= is given)"),
    ("obfuscator_key", "", "obfuscate handler: HMAC key (secret: never printed)"),
    ("lake_path", "", "lake handler: directory or s3://bucket/prefix of the lake's tables"),
    ("lake_s3_endpoint", "", "lake on S3: endpoint URL (default: AWS_ENDPOINT_URL, or AWS)"),
    ("lake_s3_region", "", "lake on S3: region (default: AWS_REGION / AWS_DEFAULT_REGION)"),
    ("lake_s3_access_key_id", "", "lake on S3: access key (default: AWS_ACCESS_KEY_ID)"),
    (
        "lake_s3_secret_access_key",
        "",
        "lake on S3: secret key (secret: never printed; default: AWS_SECRET_ACCESS_KEY)",
    ),
    ("lake_s3_session_token", "", "lake on S3: session token (secret; AWS_SESSION_TOKEN)"),
    (
        "lake_s3_allow_http",
        "",
        "lake on S3: allow an http:// endpoint (AWS_ALLOW_HTTP; on for an http:// endpoint)",
    ),
    ("lake_timeout", "60", "lake on object storage: seconds one request may take"),
    (
        "lake_catalog",
        "",
        "Iceberg lake on object storage: the catalog's local SQLite file"
        " (default: CONFIG_DIR/JOB_iceberg_catalog.db)",
    ),
    ("lake_format", "delta", "lake handler: delta or iceberg (handler arg format= per table)"),
    ("lake_compact_interval", "0", "lake handler: commits between compactions (0: never)"),
    ("lake_keep_hours", "168", "lake handler: hours of history a vacuum keeps"),
    (
        "lake_iceberg_deletes",
        "merge-on-read",
        "Iceberg: a batch's changed rows rewritten with their files (copy-on-write) or"
        " deleted by position delete files (merge-on-read)",
    ),
    ("spark_warm", "true", "start Spark once caught up after batches too large for the driver"),
    ("spark_idle_timeout", "60", "seconds an unused worker Spark session stays up (0: always)"),
    ("spark_master", "local[*]", "Spark master for copy / replay / compare jobs"),
    ("spark_wait", "120", "seconds a job waits for its first executor on a cluster"),
    ("spark_master_ui", "(master host):8080", "standalone master's web UI: who holds the cores"),
    ("spark_remote", "", "Spark Connect server (sc://host:15002) for compare, repair, diff"),
    ("spark.executor.memory", "", "any spark.* key is passed to the SparkSession"),
]

TICKER_SETTINGS: list[Setting] = [
    ("base_connstr", None, "connect string without dbname (required)"),
    ("initial_database", "template1", "database used to list the others"),
    ("database_list", "", "comma-separated databases; empty = every database with the queue"),
    ("logfile", "", "log file"),
    ("log_size", "10485760", "bytes after which the log file is rotated"),
    ("log_count", "3", "rotated log files kept"),
    ("log_format", "text", "text, or json: one JSON object per line for log shippers"),
    ("syslog", "false", "also send log lines to syslog / the journal (/dev/log)"),
    ("pidfile", "", "pid file, needed by -d / -s / -r / -k"),
    ("ticker_period", "1", "seconds between ticker runs while no event waits"),
    ("ticker_busy_period", "0.005", "seconds between ticker runs while events wait"),
    (
        "ticker_recent_period",
        "0.05",
        "seconds between ticker runs for ticker_recent_time after events were last seen",
    ),
    ("ticker_recent_time", "10", "seconds after the last events during which runs are that often"),
    ("maint_period", "120", "seconds between maintenance runs (rotation)"),
    ("retry_period", "30", "seconds between moving due retry events back"),
    ("check_period", "60", "seconds between looking for new databases"),
    ("stats_period", "30", "seconds between statistics lines in the log"),
    ("connection_lifetime", "3600", "seconds before a database connection is reopened"),
    ("metrics_port", "", "serve Prometheus /metrics on this port (off when empty)"),
    ("metrics_address", "127.0.0.1", "address the /metrics server listens on"),
]

# Read by pgferry but not advertised: the older name of a setting.
ALIASES = {"replay_batch_events": "pgq_batch_collect_events"}

# Names every config has (interpolation defaults), never written by hand.
BUILTINS = {"job_name", "service_name", "config_dir", "config_file", "host_name"}

# Settings of the original that pgferry does not take: a warning says why, once.
REFUSED = {
    "compare_sql": "compare hashes key ranges of both sides at one tick and applies each"
    " table's copy condition itself; a custom compare query is not used",
}


def known_keys(ticker: bool) -> set[str]:
    settings = TICKER_SETTINGS if ticker else NODE_SETTINGS
    return {key for key, _, _ in settings} | set(ALIASES) | BUILTINS


def check(path: Path, section: str, keys: list[str], ticker: bool) -> None:
    """Name the settings pgferry does not take, and the keys it does not know."""
    for key in keys:
        if key in REFUSED and not ticker:
            log.warning("%s: setting '%s' is ignored: %s", path, key, REFUSED[key])
    known = known_keys(ticker) | set(REFUSED)
    for key in keys:
        if key not in known and not key.startswith("spark."):
            log.warning("%s: unknown setting '%s' in [%s] (ignored)", path, key, section)
