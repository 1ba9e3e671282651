"""Where the main stream's next batch must end when a lake table is ahead of the node.

A lake table commits a batch in the lake before the node's PostgreSQL transaction records
the batch's tick.  A worker killed between the two leaves the lake one batch ahead of the
node's position; its next batch, taken again with the same bounds, is skipped by the lake
tables that hold it (their replay version says so).  But a node moved to another provider
meanwhile (change-provider, takeover) reads batches of other bounds there, and one that
spans the tick the lake holds would write part of its changes twice (a keyless table's
rows doubled).  So when the worker starts, and after each failed loop, it asks its lake
tables which tick past its position they hold; its next batch then ends exactly at that
tick (every node of the cascade makes the same ticks of the same events), which the lake
tables that hold it skip and the others apply.  The lake's commit records the provider's
time of the tick beside its id: a provider whose tick of that id was made at another time
lost the tick the lake holds (a failover to a standby that lacked it), and the worker
stops on a diverged provider naming the lake tables to resync.  A provider that has not
made that tick yet is waited for; one that passed it without holding it (a branch that
read past it in one batch) cannot give that batch: the batch is taken as usual and the
lake handler refuses it, naming resync.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from pgferry.config import Config
from pgferry.handlers import lake
from pgferry.queue import ticks as queue_ticks
from pgferry.registry import entries

log = logging.getLogger(__name__)

# The minimum event count of a batch bounded at a tick: more than any tick range holds,
# so that the batch ends at the tick itself.
WHOLE = 2**31 - 1


class LakeBound:
    """The tick the node's next batch must end at, looked up once per start and error."""

    WAIT = -1  # the provider has not made the tick yet: no batch now

    def __init__(self, config: Config | None = None) -> None:
        self._config = config  # the node's: an object store's settings
        self._look = True
        self._upto: int | None = None

    def failed(self) -> None:
        """A loop failed (a batch may have died between its two commits): look again."""
        self._look = True

    def upto(
        self, local: psycopg.Connection, provider: psycopg.Connection, queue: str,
        position: int | None,
    ) -> int | None:  # fmt: skip
        """The tick the next batch must end at, WAIT, or None (take it as usual)."""
        if self._look:
            with local.transaction():
                self._upto = lake.held_ahead(_replayed(local, queue), position, self._config)
            self._look = False
            if self._upto is not None:
                log.info("A lake table holds tick %d, past the node's tick %s: the next"
                         " batch ends there", self._upto, position)  # fmt: skip
        if self._upto is None or position is None or position >= self._upto:
            self._upto = None
            return None
        made = queue_ticks.tick_time(provider, queue, self._upto)  # None: not held there
        if made is not None:
            with local.transaction():
                lake.check_held(_replayed(local, queue), self._upto, made, self._config)
            return self._upto
        newest = queue_ticks.tick_range(provider, queue)[1]
        if newest is None or newest < self._upto:
            return self.WAIT
        log.warning("The provider does not hold tick %d, which a lake table holds: the"
                    " batch is taken as usual", self._upto)  # fmt: skip
        self._upto = None
        return None


def _replayed(conn: psycopg.Connection, queue: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, table_attrs) of the node's tables the main stream replays (state ok)."""
    return [
        (e.table_name, e.table_attrs or {})
        for e in entries.list_tables(conn, queue)
        if e.merge_state == "ok"
    ]
