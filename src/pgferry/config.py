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
from pathlib import Path
from typing import TypeVar

from pgferry import settings
from pgferry.errors import ConfigError

NODE_SECTIONS = ("pgferry", "londiste3", "londiste")
TICKER_SECTIONS = ("pgqd", "pgferry_ticker")
PATH_KEYS = ("logfile", "pidfile")

T = TypeVar("T")


@dataclass
class Config:
    """The settings of one service section, read through the typed schema of
    :mod:`pgferry.settings`: ``config.get(settings.LOG_SIZE)`` is an int, the declared
    default when the key is not set; a bad value is one ConfigError naming key and file."""

    path: Path
    section: str
    values: dict[str, str] = field(default_factory=dict)

    @property
    def ticker(self) -> bool:
        return self.section in TICKER_SECTIONS

    def has(self, key: str) -> bool:
        return key in self.values

    def get(self, setting: settings.Setting[T]) -> T:
        """The value of ``setting``: as written (parsed to its kind), else its default."""
        if setting not in _SCHEMAS[self.ticker]:
            # A reader's mistake, not the ini's: the key is not one of this section's.
            raise KeyError(f"setting '{setting.key}' is not one of [{self.section}]'s")
        key, raw = setting.key, self.values.get(setting.key)
        if raw is None:
            key, raw = next(
                ((k, self.values[k]) for k, s in settings.ALIASES.items()
                 if s is setting and k in self.values),
                (key, None),
            )  # fmt: skip
        if raw is not None:
            try:
                if not (setting.default_when and setting.default_when(raw)):
                    return setting.parse(raw)
            except settings.BadValue as exc:
                raise ConfigError(f"{self.path}: setting '{key}' {exc}") from None
        default = setting.default
        if isinstance(default, settings.Required):
            raise ConfigError(f"{self.path}: missing setting '{key}' in [{self.section}]")
        if isinstance(default, settings.Derived):
            return default.compute(self)
        return default

    @property
    def job_name(self) -> str:
        return self.get(settings.JOB_NAME)

    def spark_settings(self) -> dict[str, str]:
        """``spark.*`` keys passed straight to the SparkSession builder."""
        return {k: v for k, v in self.values.items() if k.startswith("spark.")}


_SCHEMAS = {
    ticker: frozenset(settings.schema(ticker)) for ticker in (False, True)
}  # fmt: skip


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
    parser = _ExactKeys(interpolation=None, strict=True)
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


class _ExactKeys(configparser.ConfigParser):
    """Keys kept exactly as written (spark.sql.adaptive.enabled), not lowercased."""

    def optionxform(self, optionstr: str) -> str:
        return optionstr


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
