"""A queued script (an EXECUTE event) replayed at its place in a batch's apply transaction.

:mod:`.batch` applies the rows before the script, calls :func:`run_script`, then the rows
after it with the shapes the script left.  The script runs in a savepoint of the applying
transaction: one that fails stops replay there (the transaction rolls back, the node's
position is kept) and is raised as :class:`~pgferry.scripts.skip.EventFailed`, which the
worker records so that ``skip-event`` can name it; a script the operator skipped is passed
over.  A captured DDL statement that :mod:`pgferry.scripts.ddl_check` refuses (not one
statement of the kinds capture-ddl queues, on the table it names) stops nothing: it is
logged, recorded in ``ferry.refused_event`` (which ``status`` shows) and passed over.
The steps are the ``scripts`` package's (and the registry's), each asked once, in order;
:mod:`pgferry.scripts.execute` runs the statements as translated for this node.
"""

from __future__ import annotations

import json
import logging

import psycopg

from pgferry.apply.replay.read import ScriptEvent
from pgferry.db import error_text
from pgferry.errors import PgferryError
from pgferry.events import EXECUTE_EVENT, script_hash
from pgferry.node import merge, model
from pgferry.queue.batches import Batch
from pgferry.registry import entries
from pgferry.registry import refused as registry_refused
from pgferry.registry.routes import Route
from pgferry.scripts import ddl_capture, ddl_check, skip
from pgferry.scripts.attrs import ScriptAttrs, applies_here, node_objects, replace_tags

log = logging.getLogger(__name__)


def run_script(
    local: psycopg.Connection,
    node: model.NodeInfo,
    batch: Batch,
    script: ScriptEvent,
    routes: dict[str, Route],
    seqs: list[str],
) -> None:
    """Run ``script`` in the applying transaction, between the rows around it.

    Each step asks one module once, in this order: whether the operator skipped it, whether
    it ran here already (or on another part of a merged set), whether its header lets it
    run here, whether a captured statement may run at all, its statements as translated
    for this node, running them and noting it as run, the registry following the tables
    it renamed.
    """
    # Here, not at the top: the SQL parser takes a tenth of a second to import, which
    # every worker's start would pay for batches that seldom carry a script.
    from pgferry.scripts import execute
    from pgferry.scripts.translate import drop_index_here, plan_script

    ev_id, name = script.ev_id, script.file_name
    queue = node.queue_name
    if skip.is_skipped(local, queue, batch.tick_id, ev_id):
        log.warning("%s: skipped by the operator (event %s)", name, ev_id)
        return
    local_names = {r.table_name: r.dest_fq for r in routes.values()}
    queue_tables = set(json.loads(script.tables_json)) if script.tables_json else set(local_names)
    try:
        with local.transaction():  # a savepoint: the error text must stay readable
            sha256 = script_hash(script.sql)
            ran = merge.script_ran(local, queue, name, sha256)
            if ran is not None:
                log.info(
                    "%s: already executed here, skipping"
                    if ran == queue
                    else "%s: already executed here by another part of the merged set",
                    name,
                )
                return
            captured = ddl_capture.is_captured(name)
            attrs = ScriptAttrs.from_text(script.attrs_text)
            # A captured statement's header only names the table of a DROP INDEX, which
            # ddl_check reads below.
            here = captured or applies_here(
                attrs, node_objects(local, set(local_names), local_names, frozenset(seqs))
            )
            text = replace_tags(script.sql, local_names) if attrs else script.sql
            source = None
            if captured:
                source = ddl_check.replicated_table(
                    script.sql, attrs, queue_tables | set(local_names)
                )
                here = not attrs or source in local_names
            if not here:
                log.info("%s: does not need to run on this node", name)
                plan = []
            elif attrs:
                for table in attrs.values.get("local-table", [])[:1]:
                    text = drop_index_here(text, table, local_names.get(table, table))
                plan = plan_script(text, queue_tables=set(), local_names={})
            else:
                plan = plan_script(text, queue_tables=queue_tables, local_names=local_names)
                for step in plan:
                    if not step.run:
                        log.info("%s: skipped here (%s): %s", name, step.note, step.sql)
                    elif step.note:
                        log.info("%s: translated (%s)", name, step.note)
            statements = [p.sql for p in plan if p.run]
            role = None
            if source is not None and statements:
                role = ddl_check.owner_here(local, statements, local_names.get(source))
            if here:
                log.info("Executing: %s", name)
            execute.run_queued(local, queue, name, script.sql, sha256, statements, role=role)
            for step in plan:
                if step.moves:  # the source's new name, here too
                    entries.rename_table(local, queue, *step.moves)
            if here:
                log.info("Execute finished: %s", name)
    except ddl_check.DdlRefused as exc:
        # Nothing of it ran (the savepoint is gone); a forged or malformed statement must
        # not hold up the rows behind it.
        log.error("event %s (%s): refused, not run: %s", ev_id, name, exc)
        registry_refused.record(local, queue, batch.tick_id, ev_id, name, script.sql, str(exc))
    except (psycopg.Error, PgferryError) as exc:
        error = error_text(exc) if isinstance(exc, psycopg.Error) else str(exc)
        raise skip.EventFailed(
            skip.FailedEvent(
                queue,
                node.consumer_name,
                batch.tick_id,
                ev_id,
                EXECUTE_EVENT,
                name,
                error,
            )
        ) from None
