"""Progress of a running job, per table: rows done, rows/s and ETA.

A rich progress display when stderr is a terminal, plain log lines otherwise.  Executors run
in other processes, so the driver learns progress by polling a callable (for the copy: the
bookkeeping table in the destination) from a background thread.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
LOG_EVERY_SECONDS = 10.0


class TableProgress:
    """Context manager that reports ``poll()`` (rows done per table) until the block ends."""

    def __init__(
        self,
        title: str,
        totals: Mapping[str, int | None],
        poll: Callable[[], Mapping[str, int]],
        *,
        enabled: bool | None = None,
    ) -> None:
        self.title = title
        self.totals = dict(totals)
        self.poll = poll
        self.terminal = sys.stderr.isatty() if enabled is None else enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()
        self.done: dict[str, int] = dict.fromkeys(self.totals, 0)

    def __enter__(self) -> TableProgress:
        self._started = time.monotonic()
        target = self._run_rich if self.terminal else self._run_log
        self._thread = threading.Thread(target=target, name="pgferry-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _refresh(self) -> None:
        try:
            self.done.update(self.poll())
        except Exception as exc:  # progress must never break the job itself
            log.debug("progress poll failed: %s", exc)

    def _run_log(self) -> None:
        next_log = time.monotonic() + LOG_EVERY_SECONDS
        while not self._stop.wait(POLL_SECONDS):
            if time.monotonic() >= next_log:
                self._refresh()
                self._log_lines()
                next_log = time.monotonic() + LOG_EVERY_SECONDS

    def _log_lines(self) -> None:
        elapsed = max(time.monotonic() - self._started, 1e-6)
        for table, total in self.totals.items():
            rows = self.done.get(table, 0)
            rate = rows / elapsed
            eta = ""
            if total and total > rows and rate > 0:
                eta = f", ETA {(total - rows) / rate:.0f}s"
            of = f"/{total}" if total and total > 0 else ""
            log.info("%s %s: %d%s rows, %.0f rows/s%s", self.title, table, rows, of, rate, eta)

    def _run_rich(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} rows/s"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
            ids = {
                table: progress.add_task(
                    f"{self.title} {table}", total=(total if total and total > 0 else None), rate=0
                )
                for table, total in self.totals.items()
            }
            while True:
                stopping = self._stop.wait(POLL_SECONDS)
                self._refresh()
                elapsed = max(time.monotonic() - self._started, 1e-6)
                for table, task_id in ids.items():
                    rows = self.done.get(table, 0)
                    total = self.totals.get(table)
                    if total is not None and rows > total:
                        total = rows
                    progress.update(
                        task_id, completed=rows, total=total, rate=f"{rows / elapsed:,.0f}"
                    )
                if stopping:
                    return
