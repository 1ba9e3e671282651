"""Waiting for a condition: the one poll loop every wait of pgferry uses.

``wait-sync``, ``wait-root``/``wait-provider``, compare waiting for the worker, the demo and
the test harness all poll a database until something holds or a deadline passes; they call
:func:`wait_until` instead of writing the loop again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pgferry.errors import WaitTimeout

T = TypeVar("T")


def wait_until(
    check: Callable[[], T],
    *,
    timeout: float | None,
    interval: float = 0.1,
    what: str = "condition",
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """Call ``check`` until it returns a true value and return that value.

    ``timeout`` None waits forever; otherwise :class:`WaitTimeout` (naming ``what``) is raised
    once ``timeout`` seconds have passed and a last check still failed.  ``sleep`` lets a
    daemon wait in its own interruptible way.
    """
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    while True:
        result = check()
        if result:
            return result
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")
            sleep(min(interval, left))
        else:
            sleep(interval)
