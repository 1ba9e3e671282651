"""The ticker daemon's settings: the ``[pgqd]`` section of its ini, validated once per start
and again on every reload (:class:`TickerSettings`), and the connection string of each
database it serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from psycopg import conninfo

from pgferry import settings
from pgferry.config import Config
from pgferry.db import error_text
from pgferry.errors import ConfigError


@dataclass
class TickerSettings:
    """The ``[pgqd]`` settings, validated once."""

    base_connstr: str = settings.BASE_CONNSTR.fixed
    initial_database: str = settings.INITIAL_DATABASE.fixed
    database_list: list[str] = field(default_factory=list)
    ticker_period: float = settings.TICKER_PERIOD.fixed
    ticker_busy_period: float = settings.TICKER_BUSY_PERIOD.fixed
    ticker_recent_period: float = settings.TICKER_RECENT_PERIOD.fixed
    ticker_recent_time: float = settings.TICKER_RECENT_TIME.fixed
    maint_period: float = settings.MAINT_PERIOD.fixed
    retry_period: float = settings.RETRY_PERIOD.fixed
    check_period: float = settings.CHECK_PERIOD.fixed
    stats_period: float = settings.STATS_PERIOD.fixed
    connection_lifetime: float = settings.TICKER_CONNECTION_LIFETIME.fixed

    @classmethod
    def from_config(cls, config: Config) -> TickerSettings:
        found = cls(
            base_connstr=config.get(settings.BASE_CONNSTR),
            initial_database=config.get(settings.INITIAL_DATABASE),
            database_list=[*config.get(settings.DATABASE_LIST)],
            ticker_period=config.get(settings.TICKER_PERIOD),
            ticker_busy_period=config.get(settings.TICKER_BUSY_PERIOD),
            ticker_recent_period=config.get(settings.TICKER_RECENT_PERIOD),
            ticker_recent_time=config.get(settings.TICKER_RECENT_TIME),
            maint_period=config.get(settings.MAINT_PERIOD),
            retry_period=config.get(settings.RETRY_PERIOD),
            check_period=config.get(settings.CHECK_PERIOD),
            stats_period=config.get(settings.STATS_PERIOD),
            connection_lifetime=config.get(settings.TICKER_CONNECTION_LIFETIME),
        )
        for name in (
            "ticker_period",
            "ticker_busy_period",
            "ticker_recent_period",
            "maint_period",
            "retry_period",
            "check_period",
        ):
            if getattr(found, name) <= 0:
                raise ConfigError(f"{config.path}: setting '{name}' must be positive")
        if found.ticker_recent_time < 0:
            raise ConfigError(f"{config.path}: setting 'ticker_recent_time' must not be negative")
        try:
            params = conninfo.conninfo_to_dict(found.base_connstr)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"{config.path}: invalid base_connstr: {error_text(exc)}") from None
        if "dbname" in params:
            raise ConfigError(f"{config.path}: base_connstr must not contain dbname")
        return found

    def connstr(self, dbname: str) -> str:
        return conninfo.make_conninfo(self.base_connstr, dbname=dbname)
