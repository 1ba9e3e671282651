"""The operator's one line for a Spark failure, from the text Spark wraps it in.

A failed job or session start reaches the driver as a Java exception whose message carries
the task's Python traceback or the JVM's stack; :func:`job_error` and :func:`start_error`
pick the line that says why, with secrets masked.  Plain text work: this module imports no
PySpark, so the session's modules (:mod:`.spark`, :mod:`.spark_connect`) and the jobs that
report a failure (copy, compare, repair, replay's Spark reads) share it from below.
"""

from __future__ import annotations

import re

from pgferry.db import mask_connstr


def job_error(exc: BaseException) -> str:
    """The operator-facing line of a failed Spark job (the task's own error, secrets masked).

    A task that raised a PgferryError shows up on the driver wrapped in a Java exception
    carrying the Python traceback; its last ``...Error: message`` line is what matters.
    """
    text = str(exc)
    best = ""
    for line in text.splitlines():
        stripped = line.strip()
        match = _ERROR_LINE.match(stripped)
        if match:
            best = match.group(2)
    if not best:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        best = lines[0] if lines else exc.__class__.__name__
    return mask_connstr(best)


_ERROR_LINE = re.compile(r"^(pgferry\.errors\.\w+|psycopg\.[\w.]+|\w*Error): (.+)$")
_JAVA_LINE = re.compile(r"^:?\s*(?:[\w$]+\.)+\w*(?:Exception|Error): (.+)$")


def start_error(exc: BaseException) -> str:
    """The reason a session did not start: the first Java exception's message."""
    for line in str(exc).splitlines():
        match = _JAVA_LINE.match(line.strip())
        if match:
            return mask_connstr(match.group(1))
    return job_error(exc)
