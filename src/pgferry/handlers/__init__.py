"""Per-table handlers: how one node applies, copies and forwards one table's events.

The public API for handler authors is re-exported here (see :mod:`.api` and
``docs/handlers.md``); :mod:`.registry` finds handlers (built-ins, entry points of group
``pgferry.handlers``, ``handler_modules``) and builds them from a table's stored
arguments; :mod:`.upsert` holds the set-based delete and upsert that the default handler
``bulk`` applies.
"""

from pgferry.handlers.api import (
    EVENT_COLUMNS,
    Applied,
    Event,
    Handler,
    HandlerError,
    Mode,
    Param,
    Staged,
    TableCheck,
    Target,
)

__all__ = [
    "EVENT_COLUMNS",
    "Applied",
    "Event",
    "Handler",
    "HandlerError",
    "Mode",
    "Param",
    "Staged",
    "TableCheck",
    "Target",
]
