"""Capture and deny triggers of registered tables.

On a root the queue layer's capture trigger writes each row change into the queue, as the
table's capture spec says (:mod:`.capture_spec`), through the C function of plain capture
where the server has it and the role may attach it, otherwise through PL/pgSQL functions
(each attach logs which); on a subscriber ``ferry.attach_deny``
makes direct writes fail (the worker, running with ``session_replication_role = replica``,
still applies).  Both use the same trigger names, so one detach removes either.

A table registered with ``--no-triggers`` is left alone: pgferry neither makes nor drops
its triggers, whoever asks (add-table, takeover, resurrect).
"""

from __future__ import annotations

import logging

import psycopg

from pgferry import expressions
from pgferry.errors import TableError, UsageError
from pgferry.handlers import Handler
from pgferry.queue import api as queue_api
from pgferry.registry import catalog, entries
from pgferry.registry.capture_spec import CaptureSpec

__all__ = [
    "CaptureSpec", "attach", "check_local_key", "copy_filter", "detach", "log_added",
    "refresh_specs", "registered", "root_attrs", "root_spec",
]  # fmt: skip

log = logging.getLogger(__name__)

# The plain row capture in C (ext/pgferry_capture), where the schema install could make it.
ROW_CAPTURE_IN_C = "plain_row_capture"


def registered(conn: psycopg.Connection, queue: str, fq: str) -> tuple[CaptureSpec | None, bool]:
    """(capture spec, no_triggers) of the local registry entry whose table is ``fq``;
    (None, False) when there is none or it predates capture specs."""
    entry = entries.table_at(conn, queue, fq)
    if entry is None:
        return None, False
    attrs = entry.table_attrs or {}
    spec = CaptureSpec.from_attrs(attrs)
    return spec, bool(attrs.get("no_triggers") or (spec and spec.no_triggers))


def attach(
    conn: psycopg.Connection,
    queue: str,
    fq: str,
    *,
    deny: bool,
    spec: CaptureSpec | None = None,
) -> None:
    """(Re)create the triggers of ``fq``: deny ones, or capture as ``spec`` says (by
    default the spec registered for the table, checked again against it; for a table
    without one, its primary key or the key :meth:`CaptureSpec.resolve` finds)."""
    if spec is None:
        spec, no_triggers = registered(conn, queue, fq)
        if no_triggers:
            log.debug("%s: registered with --no-triggers, triggers left alone", fq)
            return
    if deny:
        conn.execute("select ferry.attach_deny(%s, %s::regclass)", (queue, fq))
        return
    resolved = (spec or CaptureSpec()).resolve(conn, fq)
    try:
        fn = queue_api.attach_capture_spec(conn, queue, fq, resolved.to_dict())
    except psycopg.errors.InvalidParameterValue as exc:  # capture=statement refused
        raise TableError(exc.diag.message_primary or str(exc)) from None
    # Which function captures the table: the C one where plain capture may use it.
    log.info("Table %s: captured by ferry_queue.%s (%s)", fq, fn,
             "C" if fn == ROW_CAPTURE_IN_C else "PL/pgSQL")  # fmt: skip


def detach(conn: psycopg.Connection, queue: str, fq: str) -> None:
    """Drop the triggers; a table that no longer exists has none left to drop."""
    row = conn.execute("select to_regclass(%s)", (fq,)).fetchone()
    if row and row[0] is not None:
        queue_api.detach_capture(conn, queue, fq)


def refresh_specs(conn: psycopg.Connection, queue: str) -> list[str]:
    """Regenerate the capture of every table whose function names its columns (``ignore=``
    and the other options: a function generated from a template), after DDL such as a
    queued script; a spec the table no longer satisfies fails here, in the caller's
    transaction.  Returns the tables regenerated."""
    rows = [
        (e.dest_name, e.table_attrs)
        for e in entries.list_tables(conn, queue)
        if "capture" in (e.table_attrs or {})
    ]
    done = []
    for fq, attrs in rows:
        spec = CaptureSpec.from_attrs(attrs)
        if spec is None or spec.plain or spec.no_triggers or attrs.get("no_triggers"):
            continue
        attach(conn, queue, fq, deny=False, spec=spec)
        done.append(fq)
    return done


def copy_filter(
    copy_condition: str | None, attrs: dict | None
) -> tuple[str | None, tuple[str, ...]]:
    """(condition, columns left out) for copying, comparing or repairing a table: its copy
    condition ANDed with the capture's ``when=``, and the capture's ignored columns."""
    spec = CaptureSpec.from_attrs(attrs or {})
    if spec is None:
        return copy_condition, ()
    return expressions.conjunction(copy_condition, spec.when), spec.ignore


# --- add-table ------------------------------------------------------------------------------
def root_spec(
    flags: str | None, args: tuple[str, ...], no_triggers: bool, handler: Handler
) -> CaptureSpec:
    """The capture a root's add-table asks for: the operator's trigger options and those of
    the table's handler, checked before anything is looked up."""
    h_flags, h_args = handler.capture_options()
    all_flags = (flags or "") + (h_flags or "")
    all_args = (*args, *h_args)
    if not handler.captures and (all_flags or all_args):
        raise UsageError(
            f"add-table: handler {handler.name} captures nothing: no --trigger-flags or"
            " --trigger-arg"
        )
    return CaptureSpec.parse(all_flags or None, all_args, no_triggers=no_triggers)


def root_attrs(spec: CaptureSpec, flags: str | None, args: tuple[str, ...]) -> dict[str, object]:
    """A root's table_attrs: the trigger options as given and the spec made of them."""
    attrs: dict[str, object] = {}
    if spec.no_triggers:
        attrs["no_triggers"] = True
    if flags:
        attrs["tgflags"] = flags
    if args:
        attrs["trigger_args"] = list(args)
    attrs["capture"] = spec.to_dict()
    return attrs


def log_added(fq: str, spec: CaptureSpec, before: dict | None) -> None:
    """Say what is unusual about a table's capture; ``before``: its attrs when re-added."""
    if spec.keyless:
        log.info("Table %s has no key: every column identifies its rows", fq)
    elif spec.key_from != "primary key":
        log.info("Table %s: key %s (%s)", fq, ", ".join(spec.key or ()), spec.key_from)
    if spec.no_triggers:
        log.warning("Table %s: no capture trigger made (--no-triggers): its changes are"
                    " queued only by a trigger made elsewhere", fq)  # fmt: skip
    old = CaptureSpec.from_attrs(before or {})
    if old is not None and old != spec:
        log.warning("Table %s: capture changed; subscribers keep the capture they copied"
                    " until they add the table again (add-table --force)", fq)  # fmt: skip


def check_local_key(
    conn: psycopg.Connection, src: str, dest: str, spec: CaptureSpec | None
) -> None:
    """A subscriber's table must have the columns events are keyed by (the primary key,
    for a provider whose registry predates capture specs)."""
    if spec is None or spec.key is None:
        if not catalog.primary_key(conn, dest):
            raise TableError(f"Primary key missing on table: {dest}")
        return
    have = {c.name for c in catalog.columns(conn, dest)}
    for col in spec.key:
        if col not in have:
            raise TableError(f"Key column {col} of {src} missing on table: {dest}")
