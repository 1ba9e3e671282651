"""A repeated add-table: the options on the line checked against the stored registration.

``add-table`` of a table already added here (without ``--force``) changes nothing.  When the
line asks for nothing the table does not already have, it says ``Table already added`` and
succeeds; when it gives an option whose value differs from the stored one (another
``--dest-table``, ``--copy-condition``, handler, trigger options, ...) the whole command is
refused in one line naming each such option, the stored value, and what does the change:
``change-handler`` for a handler, ``add-table --force`` for what a new registration (and,
on a subscriber, a new copy) settles, ``remove-table`` then ``add-table`` for a new local
table.  Only options given on the line are compared: one left out asks for no change.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pgferry.errors import UsageError
from pgferry.handlers import registry as handler_registry
from pgferry.handlers.api import Configured
from pgferry.registry import entries
from pgferry.registry.names import parse_pattern, split_qualified

log = logging.getLogger(__name__)

FORCE = "add-table --force"
CHANGE_HANDLER = "change-handler"
READD = "remove-table, then add-table"
RESYNC = "resync --copy-mode"


@dataclass(frozen=True)
class Difference:
    option: str  # as written on the command line
    stored: str  # the registered value, for the operator
    instead: str  # the command that makes the change


def differences(
    entry: entries.TableEntry,
    opts,  # tableops.AddTableOptions (not imported: tableops imports this module)
    configured: Configured,
    *,
    root: bool,
) -> list[Difference]:
    """The options of ``opts`` given with a value other than ``entry``'s."""
    attrs = entry.table_attrs
    found: list[Difference] = []
    if opts.dest_table and not _names(opts.dest_table, entry.dest_name):
        found.append(Difference("--dest-table", entry.dest_name, READD))
    if opts.copy_condition and opts.copy_condition.strip() != (entry.copy_condition or ""):
        found.append(Difference("--copy-condition", entry.copy_condition or "none", FORCE))
    if opts.handler is not None or opts.handler_args:
        old = handler_registry.stored(attrs)
        same_args = all(old.args.get(k) == v for k, v in configured.args.items())
        if old.name != configured.name or not same_args:
            found.append(Difference("--handler", _handler_text(old), CHANGE_HANDLER))
    if root and opts.trigger_flags and opts.trigger_flags != attrs.get("tgflags"):
        found.append(Difference("--trigger-flags", attrs.get("tgflags") or "none", FORCE))
    if root and opts.trigger_args and list(opts.trigger_args) != attrs.get("trigger_args"):
        stored = " ".join(attrs.get("trigger_args") or ()) or "none"
        found.append(Difference("--trigger-arg", stored, FORCE))
    if opts.skip_truncate and not entry.skip_truncate:
        found.append(Difference("--skip-truncate", "off", FORCE))
    if opts.no_triggers and not attrs.get("no_triggers"):
        found.append(Difference("--no-triggers", "triggers made", READD))
    if opts.max_parallel_copy and opts.max_parallel_copy != entry.max_parallel_copy:
        stored = str(entry.max_parallel_copy or "none")
        found.append(Difference("--max-parallel-copy", stored, FORCE))
    if opts.no_merge and not attrs.get("no_merge"):
        found.append(Difference("--no-merge", "merged", READD))
    copy_mode = getattr(opts, "copy_mode", None)
    if not root and copy_mode and copy_mode != attrs.get("copy_mode"):
        found.append(Difference("--copy-mode", attrs.get("copy_mode") or "by size", RESYNC))
    return found


def refuse(table: str, found: list[Difference]) -> UsageError:
    """The one line refusing a repeated add-table whose options differ."""
    given = ", ".join(f"{d.option} (stored: {d.stored})" for d in found)
    ways: dict[str, list[str]] = {}
    for d in found:
        ways.setdefault(d.instead, []).append(d.option)
    use = "; ".join(f"{how} for {', '.join(opts)}" for how, opts in ways.items())
    return UsageError(
        f"add-table: {table} is already added here with other options, nothing changed:"
        f" {given}; to change them use {use}"
    )


def _names(given: str, fq: str) -> bool:
    """Whether the name ``given`` (as an operator writes it) names the table ``fq``."""
    pattern = parse_pattern(given)
    return not pattern.is_glob and bool(pattern.select([split_qualified(fq)]))


def _handler_text(configured: Configured) -> str:
    args = " ".join(f"{k}={v}" for k, v in sorted(configured.args.items()))
    return f"{configured.name} {args}".rstrip()


def already_added(entry: entries.TableEntry, opts, configured: Configured, *, root: bool) -> None:
    """Say the table is already added, or refuse the command when its options differ."""
    found = differences(entry, opts, configured, root=root)
    if found:
        raise refuse(entry.table_name, found)
    log.info("Table already added: %s", entry.table_name)
