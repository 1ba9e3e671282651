"""Logging set-up shared by every pgferry command and daemon.

Log lines go to the console (unless detached) and to ``logfile`` when configured, rotated
at ``log_size`` bytes with ``log_count`` files kept, and to syslog / the journal with
``syslog = true``; ``log_format = json`` writes one JSON object per line.  A log file
pgferry creates (a rotation's new one too) is mode 0600 whatever the umask.
:func:`reopen_logs` lets a daemon write to a fresh file after an outside rotation
(logrotate, then ``-r``).  A filter masks passwords in every record, whatever code
produced it.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from pathlib import Path

from pgferry import settings
from pgferry.config import Config
from pgferry.db import mask_connstr
from pgferry.private_files import open_log

LOG_FORMAT = "%(asctime)s %(process)d %(levelname)s %(message)s"
LOG_SIZE = settings.LOG_SIZE.fixed
LOG_COUNT = settings.LOG_COUNT.fixed


class JsonFormatter(logging.Formatter):
    """One JSON object per line (``log_format = json``), for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "pid": record.process,
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log whose files are created 0600: a log line may carry row values."""

    def _open(self):  # type: ignore[override]  # the one place logging opens the file
        return open_log(self.baseFilename, self.encoding, self.errors)


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
    size, count, fmt, syslog = LOG_SIZE, LOG_COUNT, "text", False
    if config is not None:
        # The ticker's logfile is a setting of its own (its comment differs).
        logfile = config.get(settings.TICKER_LOGFILE if config.ticker else settings.LOGFILE)
        size = config.get(settings.LOG_SIZE)
        count = config.get(settings.LOG_COUNT)
        fmt = config.get(settings.LOG_FORMAT)
        syslog = config.get(settings.SYSLOG)
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    formatter = JsonFormatter() if fmt == "json" else logging.Formatter(LOG_FORMAT)
    mask = SecretMaskFilter()
    if console:
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(formatter)
        stream.addFilter(mask)
        root.addHandler(stream)
    if logfile is not None:
        logfile.parent.mkdir(parents=True, exist_ok=True)
        filehandler = PrivateRotatingFileHandler(
            logfile, maxBytes=size, backupCount=count, encoding="utf-8"
        )
        filehandler.setFormatter(formatter)
        filehandler.addFilter(mask)
        root.addHandler(filehandler)
    if syslog and config is not None:
        address = "/dev/log" if Path("/dev/log").exists() else ("localhost", 514)
        handler = logging.handlers.SysLogHandler(address=address)
        # The journal and syslog add their own time stamp: ident and level are enough.
        ident = f"pgferry[{config.values.get('job_name') or 'pgferry'}]: "
        handler.setFormatter(
            formatter if fmt == "json" else logging.Formatter("%(levelname)s %(message)s")
        )
        handler.ident = ident
        handler.addFilter(mask)
        root.addHandler(handler)
    # py4j and Spark's Python side are chatty at INFO; keep them out unless debugging.
    for noisy in ("py4j", "py4j.java_gateway", "py4j.clientserver", "pyspark", "psycopg.pool"):
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
