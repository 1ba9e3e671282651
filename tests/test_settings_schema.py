"""The settings schema holds: each setting is declared once, with a typed default that its
own template text reads back as, and every declared setting is read by some module through
``Config.get`` (or is one the ini's reader handles itself).  Nothing here needs a database.
"""

from __future__ import annotations

import ast
import functools
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import pgferry
from pgferry import settings
from pgferry.apply.worker_settings import ReplaySettings, WorkerSettings
from pgferry.config import Config
from pgferry.errors import ConfigError
from pgferry.queue.ticker_settings import TickerSettings

pytestmark = pytest.mark.pure

SRC = Path(pgferry.__file__).parent
EVERY = {id(s): s for s in (*settings.NODE_SETTINGS, *settings.TICKER_SETTINGS)}.values()
NAMES = {id(v): k for k, v in vars(settings).items() if isinstance(v, settings.Setting)}


def _config(values: dict[str, str], section: str = "pgferry") -> Config:
    return Config(Path("node.ini"), section, values)


def _section(setting: settings.Setting[Any]) -> str:
    return "pgferry" if setting in settings.NODE_SETTINGS else "pgqd"


@functools.cache
def _referenced() -> frozenset[str]:
    """The names of settings constants that a module other than settings.py uses."""
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        if path.name == "settings.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "settings"
            ):
                found.add(node.attr)
            elif isinstance(node, ast.ImportFrom) and node.module == "pgferry.settings":
                found.update(alias.name for alias in node.names)
    return frozenset(found)


def test_each_key_declared_once_per_section() -> None:
    for schema in (settings.NODE_SETTINGS, settings.TICKER_SETTINGS):
        keys = [s.key for s in schema]
        assert len(keys) == len(set(keys))
    assert all(id(s) in NAMES for s in EVERY), "a setting in a list but not a module constant"


@pytest.mark.parametrize("setting", EVERY, ids=lambda s: f"{_section(s)}.{s.key}")
def test_every_setting_is_read(setting: settings.Setting[Any]) -> None:
    """Read by a module through its constant, or handled by the ini's reader (NOT_READ):
    a declared setting that nothing reads is a setting that does nothing."""
    if setting in settings.NOT_READ:
        assert NAMES[id(setting)] not in _referenced(), f"{setting.key} is read after all"
        return
    assert NAMES[id(setting)] in _referenced(), f"nothing reads {setting.key}"


@pytest.mark.parametrize("setting", EVERY, ids=lambda s: f"{_section(s)}.{s.key}")
def test_the_template_text_reads_as_the_default(setting: settings.Setting[Any]) -> None:
    """What ``--ini`` writes for a default, set in an ini, reads as the same value as the
    key left out: the template and the readers cannot disagree."""
    text = setting.default_text
    if isinstance(setting.default, settings.Required):
        assert text is None
        return
    assert text is not None
    section = _section(setting)
    base = {"db": "dbname=x", "queue_name": "q"} if section == "pgferry" else {}
    empty = _config(base, section)
    if isinstance(setting.default, settings.Derived):
        assert text.startswith("(")  # a description, not a value
        empty.get(setting)  # computes
        return
    assert empty.get(setting) == setting.default
    if setting.shown is not None and setting.shown.startswith("("):
        return  # a description of what the reader derives (spark_master_ui)
    assert _config({**base, setting.key: text}, section).get(setting) == setting.default


def test_typed_values() -> None:
    node = _config(
        {
            "copy_snapshot_max": "512MB", "pgq_keep_lag": "5 min", "spark_warm": "off",
            "handler_modules": "a, b,", "metrics_port": "9187", "log_format": "JSON",
            "logfile": "/tmp/x.log", "lock_timeout": "2.5", "failover_history": "0",
            "replay_batch_events": "7",
        }
    )  # fmt: skip
    assert node.get(settings.COPY_SNAPSHOT_MAX) == 512 << 20
    assert node.get(settings.PGQ_KEEP_LAG) == timedelta(minutes=5)
    assert node.get(settings.PGQ_BATCH_COLLECT_INTERVAL) is None
    assert node.get(settings.SPARK_WARM) is False
    assert node.get(settings.HANDLER_MODULES) == ("a", "b")
    assert node.get(settings.METRICS_PORT) == 9187
    assert node.get(settings.LOG_FORMAT) == "json"
    assert node.get(settings.LOGFILE) == Path("/tmp/x.log")
    assert node.get(settings.COMPARE_WAIT) == 2.5  # lock_timeout's, when that is set
    assert _config({}).get(settings.COMPARE_WAIT) == 60.0  # else 60 (docs/replication.md)
    assert node.get(settings.FAILOVER_HISTORY) == timedelta(days=1)  # 0: the default
    assert node.get(settings.PGQ_BATCH_COLLECT_EVENTS) == 7  # the older name
    assert _config({}).get(settings.JOB_NAME) == "node"


@pytest.mark.parametrize(
    ("setting", "raw", "message"),
    [
        (settings.PARALLEL_COPIES, "four", "must be an integer, not 'four'"),
        (settings.LOOP_DELAY, "1s", "must be a number, not '1s'"),
        (settings.SPARK_WARM, "maybe", "must be true or false, not 'maybe'"),
        (settings.COPY_SNAPSHOT_MAX, "lots", "must be a size like 10GB, 512MB or 0, not 'lots'"),
        (settings.PGQ_KEEP_LAG, "soon", "must be a time span like 30, 10s"),
        (settings.PGQ_KEEP_LAG, "5 parsecs", "must be a time span like 30, 10s"),
        (settings.FAILOVER_HISTORY, "soon", "must be a time span like 30, 10s"),
        (settings.FAILOVER_RECONCILE, "Maybe", "must be auto or stop, not 'maybe'"),
        (settings.METRICS_PORT, "70000", "must be a port number (1-65535), not '70000'"),
        (settings.LAKE_TIMEOUT, "1.5", "must be an integer, not '1.5'"),
    ],
    ids=lambda v: v.key if isinstance(v, settings.Setting) else v if " " not in v else None,
)
def test_a_bad_value_names_file_and_key(
    setting: settings.Setting[Any], raw: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _config({setting.key: raw}).get(setting)
    assert str(caught.value).startswith(f"node.ini: setting '{setting.key}' {message}")


def test_a_missing_required_setting_names_file_and_section() -> None:
    with pytest.raises(ConfigError, match=r"^node.ini: missing setting 'db' in \[pgferry\]$"):
        _config({}).get(settings.DB)


def test_a_setting_of_the_other_section_is_a_mistake_of_the_reader() -> None:
    """A reader that asks a node's config for a ticker setting fails at once, not with a
    silent default."""
    with pytest.raises(KeyError, match="'ticker_period' is not one of"):
        _config({"ticker_period": "2"}).get(settings.TICKER_PERIOD)
    with pytest.raises(KeyError, match="'connection_lifetime' is not one of"):
        _config({}, "pgqd").get(settings.CONNECTION_LIFETIME)
    assert _config({}, "pgqd").get(settings.TICKER_CONNECTION_LIFETIME) == 3600.0


def test_worker_settings_of_an_empty_ini_are_the_declared_defaults() -> None:
    """A node ini with only the required keys gives the same worker settings as one that
    writes every default out as the template does."""
    required = {"db": "dbname=x", "queue_name": "q"}
    written = {
        s.key: s.default_text
        for s in settings.NODE_SETTINGS
        if s.default_text is not None and not s.default_text.startswith("(")
    }
    assert WorkerSettings.from_config(_config(required)) == WorkerSettings.from_config(
        _config({**written, **required})
    )
    assert ReplaySettings.from_config(_config({})) == ReplaySettings.from_config(_config(written))


def test_ticker_settings_of_an_empty_ini_are_the_declared_defaults() -> None:
    written = {
        s.key: s.default_text for s in settings.TICKER_SETTINGS if s.default_text is not None
    }
    empty = TickerSettings.from_config(_config({}, "pgqd"))
    assert empty == TickerSettings.from_config(_config(written, "pgqd"))
    assert empty == TickerSettings()  # the dataclass's own
