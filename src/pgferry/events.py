"""The event vocabulary: the columns of a queued event and the event types pgferry queues.

``docs/events.md`` says what each holds.  Every module that names an event column or type
takes it from here: the queue's Python side, replay, branches forwarding, the handlers'
events stage, the node commands that queue events of their own.

A row event's ``ev_type`` is an operation and the key columns, ``I:id`` (insert), ``U:...``
(update), ``D:...`` (delete); the other types below are whole words.
"""

from __future__ import annotations

import hashlib

# The columns of an event, in table order, each with the type it has in a handler's
# events stage (``ev_txid`` as bigint: its xid8 holds no more there).
EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ev_id", "bigint"),
    ("ev_time", "timestamptz"),
    ("ev_txid", "bigint"),
    ("ev_retry", "integer"),
    ("ev_type", "text"),
    ("ev_data", "text"),
    ("ev_extra1", "text"),
    ("ev_extra2", "text"),
    ("ev_extra3", "text"),
    ("ev_extra4", "text"),
)
# Their names alone, in the same order (what ``SELECT *`` of an event returns).
EVENT_COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in EVENT_COLUMNS)

# Row events: the first letter of ev_type, before ':' and the key columns.
INSERT, UPDATE, DELETE = "I", "U", "D"
TRUNCATE_EVENT = "R"  # a TRUNCATE of the table named in ev_extra1
SEQ_EVENT = "SEQ"  # a sequence's value (ev_data) published by the root; ev_extra1 = the sequence
EXECUTE_EVENT = "EXECUTE"  # a queued SQL script (``execute``)
# Queued by remove-table / remove-seq on a root or branch: ev_data and ev_extra1 = the table
# or sequence, ev_extra2 = the node that removed it.
REMOVE_TABLE_EVENT = "ferry.remove-table"
REMOVE_SEQ_EVENT = "ferry.remove-seq"
REMOVAL_EVENTS = (REMOVE_TABLE_EVENT, REMOVE_SEQ_EVENT)


def script_hash(text: str) -> str:
    """An ``EXECUTE`` event's ``ev_extra3``, by which a node knows a script it ran
    (``ferry.applied_execute``): the sha256 of the script's text."""
    return hashlib.sha256(text.encode()).hexdigest()
