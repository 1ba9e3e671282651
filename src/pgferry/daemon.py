"""Process control shared by every long-running pgferry job (ticker, worker).

Implements the classic switches: ``-d`` detach (needs a pidfile), ``-s`` graceful stop
(SIGINT), ``-r`` reload config (SIGHUP), ``-k`` kill (SIGTERM), and the pidfile rules:
a pidfile locked by a live process refuses a second instance (the lock decides, so two
started at the same instant cannot both run), a stale one is taken over, the file is mode
0600, and it is removed on exit.  A detached start reports success or its one-line failure
back to the foreground process before that exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from pgferry.errors import AlreadyRunning, PgferryError
from pgferry.log import reopen_logs
from pgferry.private_files import open_private_fd

log = logging.getLogger(__name__)

SIGNAL_FOR_SWITCH = {"stop": signal.SIGINT, "reload": signal.SIGHUP, "kill": signal.SIGTERM}


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_running(pidfile: Path | None, action: str) -> str:
    """Send the signal for ``action`` (stop/reload/kill) to the process in ``pidfile``.

    Returns the message to print; like the original, a missing process is not an error.
    """
    if pidfile is None:
        return "No pidfile in config, nothing to do"
    pid = read_pid(pidfile)
    if pid is None or not pid_alive(pid):
        return "No pidfile, process not running"
    os.kill(pid, SIGNAL_FOR_SWITCH[action])
    return f"Signal {SIGNAL_FOR_SWITCH[action].name} sent to process {pid}"


_held_pidfile: int | None = None  # descriptor holding our pidfile's lock, for our lifetime


def write_pidfile(pidfile: Path) -> None:
    """Take ``pidfile`` for this process: an exclusive lock on the file decides, atomically,
    which of two processes started at once goes on (a check-then-write cannot)."""
    global _held_pidfile
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    fd = open_private_fd(pidfile, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        pid = read_pid(pidfile)
        raise AlreadyRunning(
            f"another process running with pidfile {pidfile}" + (f" (pid {pid})" if pid else "")
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    if _held_pidfile is not None:
        os.close(_held_pidfile)
    _held_pidfile = fd


def remove_pidfile(pidfile: Path) -> None:
    global _held_pidfile
    if read_pid(pidfile) == os.getpid():
        pidfile.unlink(missing_ok=True)
    if _held_pidfile is not None:
        os.close(_held_pidfile)
        _held_pidfile = None


def detach() -> int:
    """Fork into the background: new session, standard streams to /dev/null.

    Returns, in the background process, a pipe's write end: :func:`report_started` tells
    the waiting foreground process through it whether the start succeeded, so a refused
    start (another worker, a bad setting) still prints its one line and exits non-zero.
    """
    read_end, write_end = os.pipe()
    if os.fork() > 0:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            report = pipe.read().decode("utf-8", "replace")
        if report:
            print(f"pgferry: {report}", file=sys.stderr)
            os._exit(1)
        os._exit(0)
    os.close(read_end)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    return write_end


def report_started(pipe: int | None, error: str = "") -> None:
    """Tell the foreground process (if any) that the start succeeded or why it did not."""
    if pipe is None:
        return
    with contextlib.suppress(OSError):
        os.write(pipe, error.encode())
    os.close(pipe)


class Service:
    """A loop that calls :meth:`work` until stopped.

    Subclasses implement ``work() -> bool`` (True: more work is waiting, loop again at once;
    False: sleep ``loop_delay``) and may override ``reload()`` (called after SIGHUP, before
    the next loop) and ``shutdown()``.  An exception in ``work`` is logged once and the loop
    sleeps ``exception_sleep`` seconds before retrying: a daemon never exits on a transient
    fault.
    """

    loop_delay: float = 1.0
    exception_sleep: float = 20.0

    def __init__(self) -> None:
        self.stopping = False
        self._reload_requested = False
        self._last_sigint = 0.0
        self._wakeup: int | None = None  # read end of the signal wake-up pipe

    # --- to override ---------------------------------------------------------------------
    def work(self) -> bool:
        raise NotImplementedError

    def reload(self) -> None:
        """Re-read configuration; called in the main loop after SIGHUP."""

    def shutdown(self) -> None:
        """Release resources; called once when the loop ends."""

    def claim(self) -> None:
        """Take whatever makes this process the only one doing its job (a lock); raise
        :class:`AlreadyRunning` when another holds it.  Called once before the loop."""

    def on_error(self, exc: BaseException) -> None:
        """Record a failure somewhere visible (node state, ...); logging is done already."""

    # --- machinery -----------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.signal(signal.SIGHUP, self._on_sighup)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        # A signal writes a byte into this pipe, so an idle wait can block on it (and on
        # database sockets) for its whole length instead of waking every 0.1 s to look at
        # the stop and reload flags: an idle daemon then costs no CPU between its timers.
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self._wakeup = read_end

    def _on_sigint(self, signum: int, frame: object) -> None:
        now = time.monotonic()
        if now - self._last_sigint < 1.0:
            log.info("Double ^C, exiting at once")
            raise SystemExit(1)
        self._last_sigint = now
        log.info("Got SIGINT, stopping after the current loop")
        self.stopping = True

    def _on_sighup(self, signum: int, frame: object) -> None:
        self._reload_requested = True

    def _on_sigterm(self, signum: int, frame: object) -> None:
        log.info("Got SIGTERM, exiting")
        raise SystemExit(1)

    def wait_readable(self, fds: Iterable[int], timeout: float) -> set[int]:
        """Wait until one of ``fds`` can be read, a signal comes or ``timeout`` passes;
        returns the readable ones.

        Without the signal pipe (handlers not installed: a service run by a test or a
        library) the wait lasts at most 0.1 s, so that a stop request set from another
        thread is noticed as before.
        """
        watched = list(fds)
        step = max(0.0, timeout if self._wakeup is not None else min(timeout, 0.1))
        if self._wakeup is not None:
            watched.append(self._wakeup)
        if not watched:
            time.sleep(step)
            return set()
        poller = select.poll()
        for fd in watched:
            poller.register(fd, select.POLLIN)
        ready = {fd for fd, _ in poller.poll(math.ceil(step * 1000))}
        if self._wakeup in ready:
            with contextlib.suppress(OSError):
                while os.read(self._wakeup, 64):
                    pass
            ready.discard(self._wakeup)
        return ready

    def sleep(self, seconds: float) -> None:
        """Sleep, noticing stop and reload requests at once."""
        deadline = time.monotonic() + seconds
        while not self.stopping and not self._reload_requested:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.wait_readable((), left)

    def run_forever(self, once: bool = False) -> None:
        error_message: str | None = None
        try:
            while not self.stopping:
                if self._reload_requested:
                    self._reload_requested = False
                    reopen_logs()  # after logrotate moved the file away
                    log.info("Reloading config")
                    self.reload()
                try:
                    more = self.work()
                    error_message = None
                except (KeyboardInterrupt, SystemExit, AlreadyRunning):
                    raise
                except Exception as exc:  # noqa: BLE001 - the loop must survive any fault
                    message = exc_message(exc)
                    if message != error_message:
                        log.error("%s", message, exc_info=not isinstance(exc, PgferryError))
                    else:
                        log.warning("still failing: %s", message)
                    error_message = message
                    try:
                        self.on_error(exc)
                    except Exception as inner:  # noqa: BLE001
                        log.debug("could not record error: %s", inner)
                    self.sleep(self.exception_sleep)
                    continue
                if once:
                    break
                if not more:
                    self.sleep(self.loop_delay)
        finally:
            self.shutdown()


def exc_message(exc: BaseException) -> str:
    from pgferry.db import error_text

    if isinstance(exc, PgferryError):
        return str(exc)
    return f"{exc.__class__.__name__}: {error_text(exc)}"


def run_service(
    make_service: Callable[[], Service],
    *,
    pidfile: Path | None,
    daemonize: bool,
    setup_logging: Callable[[bool], None],
) -> int:
    """Start a service in the foreground or detached, with pidfile handling.

    ``setup_logging(console)`` is called after detaching so that file handles are fresh.
    """
    pipe = None
    if daemonize:
        if pidfile is None:
            raise PgferryError("Daemon needs pidfile")
        pipe = detach()
    try:
        setup_logging(not daemonize)
        if pidfile is not None:
            write_pidfile(pidfile)
        service = make_service()
        service.claim()
    except Exception as exc:
        if daemonize:
            log.error("%s", exc_message(exc))  # the foreground process prints it too
        # The pidfile goes first: the foreground process returns as soon as it hears.
        if pidfile is not None:
            remove_pidfile(pidfile)
        report_started(pipe, exc_message(exc))
        raise
    report_started(pipe)
    try:
        service.install_signal_handlers()
        service.run_forever()
    finally:
        if pidfile is not None:
            remove_pidfile(pidfile)
    return 0
