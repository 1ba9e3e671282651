"""Exception classes shared by every layer.

Anything derived from :class:`PgferryError` is an expected failure: the CLI prints its
message as one line and exits non-zero, without a traceback.
"""


class PgferryError(Exception):
    """An expected failure with a message meant for the operator."""

    exit_code = 1


class UsageError(PgferryError):
    """Bad command line arguments."""

    exit_code = 2


class ConfigError(PgferryError):
    """A missing, unreadable or malformed configuration file or setting."""


class DatabaseError(PgferryError):
    """A database could not be reached or refused an operation."""


class QueueError(PgferryError):
    """Unknown queue or consumer, or a queue operation that is not allowed."""


class NodeError(PgferryError):
    """Cascade node set-up or state problem (wrong node type, unknown node, ...)."""


class DivergedProvider(NodeError):
    """The provider's tick of a recorded id is not the tick applied here: the provider lost
    ticks this node applied (a failover to a standby that lacked them)."""


class TableError(PgferryError):
    """Unknown table, missing primary key, incompatible columns, ..."""


class AlreadyRunning(PgferryError):
    """Another process already does this job (same pidfile, or same node): stop at once."""


class WaitTimeout(PgferryError):
    """A condition polled for did not come true before its deadline."""


class SparkUnavailable(PgferryError):
    """Spark cannot be used: its master cannot be reached, gives no cores in time, or is of
    a kind pgferry does not support."""
