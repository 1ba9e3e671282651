"""The simplest built-in handlers: ``bulk`` (the default) and ``vtable``."""

from __future__ import annotations

from pgferry.handlers.api import Applied, Handler, Staged


class Bulk(Handler):
    """Apply each batch set-based: deletes by key, then one upsert (the default).

    The table's events of a batch are collapsed to the last image per primary key on the
    provider, staged, and applied with one DELETE ... USING and one INSERT ... ON CONFLICT.
    A TRUNCATE of the source truncates the table (unless added with --skip-truncate).
    """

    name = "bulk"
    on_root = True


class VTable(Handler):
    """Registered only: no local table, nothing applied, nothing copied.

    The table counts as replicated on this node (a branch still forwards its events, and
    nodes below can add it), but its events are not read here and the node holds none of
    its rows, so it can never be a copy source.  On a root: no capture triggers and no
    table needed (events of that name may be queued by other means).
    """

    name = "vtable"
    needs_table = False
    on_root = True
    captures = False

    @property
    def replays(self) -> bool:
        return False

    def apply(self, staged: Staged) -> Applied:
        return Applied()
