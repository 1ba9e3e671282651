"""The ticker daemon's settings: the ``[pgqd]`` section of its ini, validated once per start
and again on every reload (:class:`TickerSettings`), and the connection string of each
database it serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from psycopg import conninfo

from pgferry.config import Config
from pgferry.db import error_text
from pgferry.errors import ConfigError


@dataclass
class TickerSettings:
    """The ``[pgqd]`` settings, validated once."""

    base_connstr: str = ""
    initial_database: str = "template1"
    database_list: list[str] = field(default_factory=list)
    ticker_period: float = 1.0
    ticker_busy_period: float = 0.005
    ticker_recent_period: float = 0.05
    ticker_recent_time: float = 10.0
    maint_period: float = 120.0
    retry_period: float = 30.0
    check_period: float = 60.0
    stats_period: float = 30.0
    connection_lifetime: float = 3600.0

    @classmethod
    def from_config(cls, config: Config) -> TickerSettings:
        settings = cls(
            base_connstr=config.get("base_connstr", ""),
            initial_database=config.get("initial_database", "template1"),
            database_list=config.getlist("database_list"),
            ticker_period=config.getfloat("ticker_period", 1.0),
            ticker_busy_period=config.getfloat("ticker_busy_period", 0.005),
            ticker_recent_period=config.getfloat("ticker_recent_period", 0.05),
            ticker_recent_time=config.getfloat("ticker_recent_time", 10.0),
            maint_period=config.getfloat("maint_period", 120.0),
            retry_period=config.getfloat("retry_period", 30.0),
            check_period=config.getfloat("check_period", 60.0),
            stats_period=config.getfloat("stats_period", 30.0),
            connection_lifetime=config.getfloat("connection_lifetime", 3600.0),
        )
        for name in (
            "ticker_period",
            "ticker_busy_period",
            "ticker_recent_period",
            "maint_period",
            "retry_period",
            "check_period",
        ):
            if getattr(settings, name) <= 0:
                raise ConfigError(f"{config.path}: setting '{name}' must be positive")
        if settings.ticker_recent_time < 0:
            raise ConfigError(f"{config.path}: setting 'ticker_recent_time' must not be negative")
        try:
            params = conninfo.conninfo_to_dict(settings.base_connstr)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"{config.path}: invalid base_connstr: {error_text(exc)}") from None
        if "dbname" in params:
            raise ConfigError(f"{config.path}: base_connstr must not contain dbname")
        return settings

    def connstr(self, dbname: str) -> str:
        return conninfo.make_conninfo(self.base_connstr, dbname=dbname)
