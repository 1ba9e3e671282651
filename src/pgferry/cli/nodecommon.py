"""Shared start of the node admin commands: logging set-up and the local connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from pgferry import db, settings
from pgferry.cli.registry import Context
from pgferry.config import Config
from pgferry.errors import DatabaseError
from pgferry.handlers import registry as handler_registry
from pgferry.log import setup_logging
from pgferry.node import connect


def start(ctx: Context) -> Config:
    """Load the config (failing clearly on a missing ``db``/``queue_name``) and set up logs."""
    config = ctx.config()
    config.get(settings.DB)
    config.get(settings.QUEUE_NAME)
    setup_logging(config=config, verbose=ctx.verbose, quiet=ctx.quiet)
    handler_registry.use_modules(config.get(settings.HANDLER_MODULES))  # a table may name them
    return config


@contextmanager
def local_tx(config: Config) -> Iterator[psycopg.Connection]:
    """The local database in one transaction: committed on success, rolled back on error."""
    connstr = connect.local_connstr(config)
    conn = connect.connect_local(config)
    try:
        with conn:
            yield conn
    except psycopg.Error as exc:
        raise DatabaseError(f"{db.describe(connstr)}: {db.error_text(exc)}") from None
