"""Files that only their owner may read: logs, pidfiles, repair and dump files.

A repair file or a resurrect dump holds row data, a log may hold anything a statement
carried; none of them is for the other users of the machine, whatever the umask says.
Every such file is opened here, created with mode 0600; a file pgferry writes over
(a repair file written again, a pidfile taken over) is set to 0600 too.  A log file that
exists is opened for appending as it is: a mode its operator chose (logrotate's
``create 0640 pgferry adm``) stays.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO

PRIVATE_MODE = 0o600


def open_private(path: Path | str, *, exclusive: bool = False) -> IO[str]:
    """``path`` opened for writing text (UTF-8), emptied, mode 0600; with ``exclusive``
    the file must not exist yet (FileExistsError)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_MODE)
    try:
        os.fchmod(fd, PRIVATE_MODE)  # an existing file keeps its mode through O_TRUNC
        return os.fdopen(fd, "w", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def open_private_fd(path: Path | str, flags: int) -> int:
    """A descriptor on ``path`` (``os.open`` ``flags``, O_CREAT added), mode 0600."""
    fd = os.open(path, flags | os.O_CREAT, PRIVATE_MODE)
    with contextlib.suppress(OSError):  # not ours (another user's, left writable): as is
        os.fchmod(fd, PRIVATE_MODE)
    return fd


def open_log(path: Path | str, encoding: str | None, errors: str | None) -> IO[str]:
    """A log file opened for appending; created 0600, an existing one keeps its mode."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_MODE)
    return os.fdopen(fd, "a", encoding=encoding, errors=errors)
