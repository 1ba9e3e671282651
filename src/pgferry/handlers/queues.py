"""Handlers that send a table's events to a queue instead of a table: ``qsplitter``."""

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
