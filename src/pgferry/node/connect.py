"""Connection strings of a node config: the local database and the other members.

``remote_extra_connstr`` (as in the original) is appended to every other node's public
location, e.g. to add ``user=`` or ``sslmode=`` for this host only.
"""

from __future__ import annotations

import psycopg

from pgferry import db, settings
from pgferry.config import Config


def local_connstr(config: Config) -> str:
    return config.get(settings.DB)


def queue_name(config: Config) -> str:
    return config.get(settings.QUEUE_NAME)


def remote_connstr(config: Config, location: str) -> str:
    extra = config.get(settings.REMOTE_EXTRA_CONNSTR)
    return f"{location} {extra}" if extra else location


def connect_local(config: Config, **kwargs) -> psycopg.Connection:
    return db.connect(local_connstr(config), **kwargs)


def connect_remote(config: Config, location: str, **kwargs) -> psycopg.Connection:
    return db.connect(remote_connstr(config, location), **kwargs)


def database_identity(conn: psycopg.Connection) -> tuple:
    """What identifies one database of one running server, for the public connstr check."""
    row = conn.execute(
        """
        select d.oid, d.datname, pg_postmaster_start_time()
          from pg_database d where d.datname = current_database()
        """
    ).fetchone()
    return tuple(row) if row else ()
