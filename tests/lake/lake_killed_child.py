"""What a spawned child process runs in the lake kill tests: a lake worker's next batch,
SIGKILLed right after its lake commit (before PostgreSQL's).

A module of its own, importing no ``conftest``: a spawned child imports the module of its
target by name, and in a whole test run ``conftest`` names the first test folder's."""

from __future__ import annotations

import os
import signal

from pgferry.apply.worker import Worker
from pgferry.config import load_config


def killed_after_the_lake_commit(ini: str, fmt: str) -> None:
    if fmt == "iceberg":
        from pgferry.lake import iceberg as module
    else:
        from pgferry.lake import delta as module
    real = module.multiset

    def killed(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    module.multiset = killed
    Worker(load_config(ini)).work()
    os._exit(3)  # not killed: the batch never reached the lake


def killed_after_the_iceberg_merge(ini: str) -> None:
    """The same for a keyed Iceberg table's batch (its merge, merge-on-read or not)."""
    from pgferry.lake import iceberg

    real = iceberg.merge

    def killed(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    iceberg.merge = killed
    Worker(load_config(ini)).work()
    os._exit(3)  # not killed: the batch never reached the lake
