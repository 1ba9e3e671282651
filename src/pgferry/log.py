"""Logging set-up shared by every pgferry command and daemon.

Log lines go to the console (unless detached) and to ``logfile`` when configured, rotated
at ``log_size`` bytes with ``log_count`` files kept.  :func:`reopen_logs` lets a daemon
write to a fresh file after an outside rotation (logrotate, then ``-r``).  A filter masks
passwords in every record, whatever code produced it.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from pgferry.config import Config
from pgferry.db import mask_connstr

LOG_FORMAT = "%(asctime)s %(process)d %(levelname)s %(message)s"
LOG_SIZE = 10 * 1024 * 1024
LOG_COUNT = 3


class SecretMaskFilter(logging.Filter):
    """Replace password values in the final message with ``[...]``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_connstr(message)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def setup_logging(
    *,
    config: Config | None = None,
    logfile: Path | None = None,
    verbose: int = 0,
    quiet: bool = False,
    console: bool = True,
) -> None:
    """Configure the root logger; safe to call again (handlers are replaced).

    ``config`` supplies ``logfile``, ``log_size`` and ``log_count``; ``logfile`` alone is for
    commands without a config.
    """
    size, count = LOG_SIZE, LOG_COUNT
    if config is not None:
        logfile = config.getpath("logfile")
        size = config.getint("log_size", LOG_SIZE)
        count = config.getint("log_count", LOG_COUNT)
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    formatter = logging.Formatter(LOG_FORMAT)
    mask = SecretMaskFilter()
    if console:
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(formatter)
        stream.addFilter(mask)
        root.addHandler(stream)
    if logfile is not None:
        logfile.parent.mkdir(parents=True, exist_ok=True)
        filehandler = logging.handlers.RotatingFileHandler(
            logfile, maxBytes=size, backupCount=count, encoding="utf-8"
        )
        filehandler.setFormatter(formatter)
        filehandler.addFilter(mask)
        root.addHandler(filehandler)
    # py4j and Spark's Python side are chatty at INFO; keep them out unless debugging.
    for noisy in ("py4j", "py4j.java_gateway", "py4j.clientserver", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose > 1 else logging.WARNING)


def reopen_logs() -> None:
    """Close the log files; each is opened again, by its name, at the next line written."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.acquire()
            try:
                handler.close()
                handler.stream = None  # type: ignore[assignment]  # reopened on emit
            finally:
                handler.release()
