"""Tables that live in a queue rather than as rows: ``qsplitter`` and ``qtable``."""

from __future__ import annotations

from pgferry.handlers.api import Applied, Handler, HandlerError, Param, Staged, TableCheck
from pgferry.queue import api as queue_api


class QSplitter(Handler):
    """Put the table's events into another queue of this node instead of applying them.

    Every event of the table (TRUNCATEs included) is inserted into the local queue named
    by queue, in ev_id order, with its ev_type, ev_data and ev_extra1..4, in the
    transaction that applies the batch: consumers of that queue see them once the batch
    commits and the queue ticks.  The events get that queue's ids and the time they were
    inserted there.  No local table is needed and nothing is copied.
    """

    name = "qsplitter"
    mode = "events"
    needs_table = False
    params = (Param("queue", "the local queue that receives the events", required=True),)

    def check(self, table: TableCheck) -> None:
        if not queue_api.queue_exists(table.conn, self.args["queue"]):
            raise HandlerError(f"handler qsplitter: no queue {self.args['queue']} on this node")

    def apply(self, staged: Staged) -> Applied:
        count = queue_api.insert_staged_events(staged.conn, self.args["queue"], staged.relation)
        return Applied(upserts=count)


class QTable(Handler):
    """A queue-only table: on the root its inserts are queued but never stored; a
    subscriber with this handler ignores its events.

    On the root the capture trigger runs BEFORE INSERT and cancels the write (trigger
    flags S and I): the table stays empty and its rows exist only as events, for the
    queue's consumers and the subscribers.  On a branch or leaf nothing is kept (no table
    needed, its events are not read; a branch forwards them).  Since no node with this
    handler holds rows, a subscriber that wants them as a table adds it with the default
    handler and --expect-sync.
    """

    name = "qtable"
    needs_table = False
    on_root = True

    @property
    def replays(self) -> bool:
        return False

    def apply(self, staged: Staged) -> Applied:
        return Applied()

    def capture_options(self) -> tuple[str | None, tuple[str, ...]]:
        return "SI", ()
