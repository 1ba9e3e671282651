"""A queued script (an EXECUTE event) replayed at its place in a batch's apply transaction.

:mod:`.batch` applies the rows before the script, calls :func:`run_script`, then the rows
after it with the shapes the script left.  The script runs in a savepoint of the applying
transaction: one that fails stops replay there (the transaction rolls back, the node's
position is kept) and is raised as :class:`~pgferry.scripts.skip.EventFailed`, which the
worker records so that ``skip-event`` can name it; a script the operator skipped is passed
over.  A captured DDL statement that :mod:`pgferry.scripts.ddl_check` refuses (not one
statement of the kinds capture-ddl queues, on the table it names) stops nothing: it is
logged, recorded in ``ferry.refused_event`` (which ``status`` shows) and passed over.
What the script does to the local tables is :mod:`pgferry.scripts.execute`'s.
"""

from __future__ import annotations

import logging

import psycopg

from pgferry.apply.read import ScriptEvent
from pgferry.db import error_text
from pgferry.errors import PgferryError
from pgferry.events import EXECUTE_EVENT
from pgferry.node import model
from pgferry.queue.batches import Batch
from pgferry.registry import refused as registry_refused
from pgferry.registry.routes import Route
from pgferry.scripts import ddl_check, skip

log = logging.getLogger(__name__)


def run_script(
    local: psycopg.Connection,
    node: model.NodeInfo,
    batch: Batch,
    script: ScriptEvent,
    routes: dict[str, Route],
    seqs: list[str],
) -> None:
    """Run ``script`` in the applying transaction, between the rows around it."""
    from pgferry.scripts.execute import apply_script_event

    ev_id, file_name = script.ev_id, script.file_name
    queue = node.queue_name
    if skip.is_skipped(local, queue, batch.tick_id, ev_id):
        log.warning("%s: skipped by the operator (event %s)", file_name, ev_id)
        return
    try:
        with local.transaction():  # a savepoint: the error text must stay readable
            apply_script_event(
                local,
                queue,
                script_sql=script.sql,
                file_name=file_name,
                attrs_text=script.attrs_text,
                queue_tables_json=script.tables_json,
                local_names={r.table_name: r.dest_fq for r in routes.values()},
                local_seqs=frozenset(seqs),
            )
    except ddl_check.DdlRefused as exc:
        # Nothing of it ran (the savepoint is gone); a forged or malformed statement must
        # not hold up the rows behind it.
        log.error("event %s (%s): refused, not run: %s", ev_id, file_name, exc)
        registry_refused.record(local, queue, batch.tick_id, ev_id, file_name, script.sql, str(exc))
    except (psycopg.Error, PgferryError) as exc:
        error = error_text(exc) if isinstance(exc, psycopg.Error) else str(exc)
        raise skip.EventFailed(
            skip.FailedEvent(
                queue,
                node.consumer_name,
                batch.tick_id,
                ev_id,
                EXECUTE_EVENT,
                file_name,
                error,
            )
        ) from None
