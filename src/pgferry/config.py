"""Reading ini files in the londiste3 / pgqd style.

A config file has one service section: ``[pgferry]``, ``[londiste3]`` or ``[londiste]`` for a
replication node, ``[pgqd]`` for the ticker.  ``%(name)s`` interpolation works as in the
original, with the built-in defaults ``job_name`` (file name without extension),
``service_name``, ``config_dir``, ``config_file`` and ``host_name``.  ``~`` in path settings
is expanded.  Every ``spark.*`` key and ``spark_master`` are kept for the Spark pipeline.
"""

from __future__ import annotations

import configparser
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from pgferry import settings
from pgferry.errors import ConfigError

NODE_SECTIONS = ("pgferry", "londiste3", "londiste")
TICKER_SECTIONS = ("pgqd", "pgferry_ticker")
PATH_KEYS = ("logfile", "pidfile")
DEFAULT_SPARK_MASTER = "local[*]"

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)?")
_UNITS = (
    (("ms", "msec", "millisecond", "milliseconds"), 0.001),
    (("s", "sec", "secs", "second", "seconds"), 1.0),
    (("m", "min", "mins", "minute", "minutes"), 60.0),
    (("h", "hour", "hours"), 3600.0),
    (("d", "day", "days"), 86400.0),
)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass
class Config:
    """The settings of one service section, with typed getters that fail clearly."""

    path: Path
    section: str
    values: dict[str, str] = field(default_factory=dict)

    def has(self, key: str) -> bool:
        return key in self.values

    def get(self, key: str, default: str | None = None) -> str:
        if key in self.values:
            return self.values[key]
        if default is None:
            raise ConfigError(f"{self.path}: missing setting '{key}' in [{self.section}]")
        return default

    def getopt(self, key: str) -> str | None:
        return self.values.get(key)

    def getint(self, key: str, default: int | None = None) -> int:
        raw = self.get(key, None if default is None else str(default))
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(
                f"{self.path}: setting '{key}' must be an integer, not {raw!r}"
            ) from None

    def getfloat(self, key: str, default: float | None = None) -> float:
        raw = self.get(key, None if default is None else str(default))
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(
                f"{self.path}: setting '{key}' must be a number, not {raw!r}"
            ) from None

    def getseconds(self, key: str) -> timedelta | None:
        """A time span: seconds (``30``, ``1.5``) or a number and a unit (``10s``, ``5 min``,
        ``2 hours``); None when the key is not set or empty."""
        raw = (self.values.get(key) or "").strip()
        if not raw:
            return None
        match = _SPAN.fullmatch(raw.lower())
        if match is None:
            raise ConfigError(
                f"{self.path}: setting '{key}' must be a time span like 30, 10s, 5 min or"
                f" 2 hours, not {raw!r}"
            )
        unit = match.group(2) or "s"
        factor = next(f for names, f in _UNITS if unit in names)
        return timedelta(seconds=float(match.group(1)) * factor)

    def getbool(self, key: str, default: bool = False) -> bool:
        raw = self.values.get(key)
        if raw is None:
            return default
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{self.path}: setting '{key}' must be true or false, not {raw!r}")

    def getlist(self, key: str, default: Iterable[str] = ()) -> list[str]:
        raw = self.values.get(key)
        if raw is None:
            return list(default)
        return [item.strip() for item in raw.split(",") if item.strip()]

    def getpath(self, key: str) -> Path | None:
        raw = self.values.get(key)
        return Path(os.path.expanduser(raw)) if raw else None

    @property
    def job_name(self) -> str:
        return self.get("job_name")

    def spark_settings(self) -> dict[str, str]:
        """``spark.*`` keys passed straight to the SparkSession builder."""
        return {k: v for k, v in self.values.items() if k.startswith("spark.")}

    @property
    def spark_master(self) -> str:
        return self.values.get("spark_master", DEFAULT_SPARK_MASTER)


def load_config(
    path: str | os.PathLike[str],
    sections: Iterable[str] = NODE_SECTIONS,
    overrides: Mapping[str, str] | None = None,
) -> Config:
    """Read ``path`` and return the first of ``sections`` it contains.

    ``overrides`` (from ``--set KEY=VAL``) win over the file.
    """
    path = Path(os.path.expanduser(str(path)))
    sections = tuple(sections)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    builtin = {
        "job_name": path.stem,
        "config_dir": str(path.resolve().parent),
        "config_file": str(path.resolve()),
        "host_name": socket.gethostname(),
    }
    # Interpolation is done by _interpolate (formats like compare_fmt's stay as written).
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keep spark.sql.adaptive.enabled etc. exactly as written
    try:
        with path.open(encoding="utf-8") as fh:
            parser.read_file(fh)
    except (configparser.Error, UnicodeDecodeError, OSError) as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"{path}: cannot parse config: {first}") from None
    section = next((s for s in sections if parser.has_section(s)), None)
    if section is None:
        wanted = " or ".join(f"[{s}]" for s in sections)
        raise ConfigError(f"{path}: no {wanted} section")
    raw = dict(parser.items(section, raw=True))
    settings.check(path, section, list(raw), ticker=section in TICKER_SECTIONS)
    base = {**builtin, "service_name": section, **raw, **(overrides or {})}
    values: dict[str, str] = {}
    for key, value in base.items():
        values[key] = _interpolate(path, key, value, base)
    for key in PATH_KEYS:
        if values.get(key):
            values[key] = os.path.expanduser(values[key])
    return Config(path=path, section=section, values=values)


_REF = re.compile(r"%\(([^)]+)\)s")


def _interpolate(path: Path, key: str, value: str, scope: Mapping[str, str]) -> str:
    """Resolve ``%(name)s`` references to other settings, nested up to a depth limit.

    References to names that are not settings (``%(cnt)d`` in ``compare_fmt``) stay as
    written, because they are formats filled in later.
    """
    result = value
    for _ in range(10):
        replaced = _REF.sub(lambda m: scope.get(m.group(1), m.group(0)), result)
        if replaced == result:
            return result
        result = replaced
    raise ConfigError(f"{path}: setting '{key}' refers to itself through %(...)s")


def parse_set_options(items: Iterable[str]) -> dict[str, str]:
    """Turn ``--set KEY=VAL`` arguments into a dict."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        result[key.strip()] = value.strip()
    return result
