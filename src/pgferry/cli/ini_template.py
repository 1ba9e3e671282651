"""``pgferry --ini``: a commented template of every setting.

Without a config file the template of a replication node is printed; given a ticker
config (a ``[pgqd]`` section) the ticker's template.  Values already set in the given file
are filled in, the rest stay commented out with their defaults.
"""

from __future__ import annotations

from pathlib import Path

from pgferry.config import NODE_SECTIONS, TICKER_SECTIONS, load_config
from pgferry.errors import ConfigError

# (key, default or None when required, comment); "" default means "no value by default".
NODE_SETTINGS: list[tuple[str, str | None, str]] = [
    ("job_name", "(file name without .ini)", "worker and consumer name (default: file name)"),
    ("db", None, "libpq connect string of the local database (required)"),
    ("queue_name", None, "queue (cascade) name, e.g. replika (required)"),
    ("logfile", "", "log file, e.g. ~/log/%(job_name)s.log (rotated at 10 MiB, 3 kept)"),
    ("pidfile", "", "pid file, needed by -d / -s / -r / -k"),
    ("node_name", "", "default NODE for create-root/branch/leaf"),
    ("public_node_location", "", "default public connect string for create-*"),
    ("initial_provider_location", "", "default --provider for create-branch/leaf"),
    ("remote_extra_connstr", "", "appended to other nodes' connect strings (user=, sslmode=)"),
    ("parallel_copies", "1", "tables copied at the same time"),
    ("local_only", "false", "fetch only events of locally attached tables"),
    ("lock_timeout", "10", "seconds: statement timeout of admin locks, compare wait limit"),
    ("loop_delay", "1.0", "seconds to sleep when there is no work"),
    ("exception_sleep", "20", "seconds to wait after an error before retrying"),
    ("connection_lifetime", "1200", "seconds before a database connection is reopened"),
    ("pgq_batch_collect_events", "200000", "events per multi-tick batch when catching up"),
    ("pgq_batch_collect_interval", "", "minimum time span per batch (interval text)"),
    ("pgq_keep_lag", "", "only take batches older than this interval"),
    (
        "compare_sql",
        "select count(1) as cnt, sum(hashtext(t.*::text)) as chksum from only _TABLE_ t",
        "kept for compatibility: custom compare query",
    ),
    ("compare_fmt", "%(cnt)d rows, checksum=%(chksum)s", "kept for compatibility"),
    ("replay_local_events", "50000", "larger batches are read by Spark when it is up"),
    ("replay_read_ahead", "2", "provider connections reading tables ahead of the apply"),
    ("replay_read_ahead_events", "2000", "smaller batches are read without reader threads"),
    ("replay_read_range_events", "50000", "larger tables are read in ev_id ranges of this size"),
    ("spark_warm", "true", "start Spark in the background once caught up"),
    ("spark_master", "local[*]", "Spark master for copy / replay / compare jobs"),
    ("spark.executor.memory", "", "any spark.* key is passed to the SparkSession"),
]

TICKER_SETTINGS: list[tuple[str, str | None, str]] = [
    ("base_connstr", None, "connect string without dbname (required)"),
    ("initial_database", "template1", "database used to list the others"),
    ("database_list", "", "comma-separated databases; empty = every database with the queue"),
    ("logfile", "", "log file"),
    ("pidfile", "", "pid file, needed by -d / -s / -r / -k"),
    ("ticker_period", "1", "seconds between ticker runs"),
    ("maint_period", "120", "seconds between maintenance runs (rotation)"),
    ("retry_period", "30", "seconds between moving due retry events back"),
    ("check_period", "60", "seconds between looking for new databases"),
]


def _render(section: str, settings: list[tuple[str, str | None, str]], have: dict) -> str:
    lines = [f"[{section}]"]
    for key, default, comment in settings:
        lines.append(f"# {comment}")
        if key in have:
            lines.append(f"{key} = {have[key]}")
        elif default is None:
            lines.append(f"{key} = ")
        else:
            lines.append(f"#{key} = {default}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def template_for(path: str | Path | None) -> str:
    """The template for a node config (default) or for the ticker config at ``path``."""
    if path is None:
        return _render("pgferry", NODE_SETTINGS, {})
    try:
        config = load_config(path, NODE_SECTIONS + TICKER_SECTIONS)
    except ConfigError:
        if Path(path).is_file():
            raise
        return _render("pgferry", NODE_SETTINGS, {})
    raw = _raw_values(Path(path), config.section)
    if config.section in TICKER_SECTIONS:
        return _render(config.section, TICKER_SETTINGS, raw)
    return _render(config.section, NODE_SETTINGS, raw)


def _raw_values(path: Path, section: str) -> dict[str, str]:
    """Settings as written in the file (interpolation left as it is)."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment]
    parser.read(path, encoding="utf-8")
    return dict(parser.items(section)) if parser.has_section(section) else {}
