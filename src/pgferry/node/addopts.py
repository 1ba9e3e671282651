"""add-table's options, and the checks of their combinations made before anything is read.

:class:`AddTableOptions` is what ``add-table`` was given; :func:`check` refuses, with one
line, the options that do not fit the node (a root's capture flags on a subscriber, a
subscriber's destination flags on the root, merge flags off a merge leaf) or the chosen
handler (a table's options for a handler that keeps no table), or each other.  It runs
first in :func:`pgferry.node.tableops.add_tables`, so a refusal changes nothing.  The
checks against what is stored for a table already added are :mod:`.readd`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pgferry.errors import UsageError
from pgferry.handlers import Handler
from pgferry.node import model


@dataclass
class AddTableOptions:
    all: bool = False
    dest_table: str | None = None
    copy_condition: str | None = None
    max_parallel_copy: int | None = None
    create: bool = False
    create_full: bool = False  # --create plus indexes and constraints of the source
    no_triggers: bool = False
    skip_truncate: bool = False
    expect_sync: bool = False
    force: bool = False
    handler: str | None = None  # --handler (None: the default, not stored)
    handler_args: list[str] = field(default_factory=list)  # --handler-arg K=V texts
    trigger_flags: str | None = None  # --trigger-flags, as given (root only)
    trigger_args: tuple[str, ...] = ()  # --trigger-arg, as given (root only)
    copy_node: str | None = None  # --copy-node=NODE, or copynode.FIND (--find-copy-node)
    copy_mode: str | None = None  # --copy-mode: chunked or snapshot (None: by size)
    merge_all: bool = False  # on a merge leaf: on every part of its merged set
    no_merge: bool = False  # on a merge leaf: this queue's own table, not merged
    skip_non_existing: bool = False  # a table missing here or on the provider: warn, go on


def check(opts: AddTableOptions, node: model.NodeInfo, handler: Handler) -> None:
    """Refuse options that do not fit ``node``, ``handler`` or each other."""
    if opts.merge_all and opts.no_merge:
        raise UsageError("add-table: --merge-all and --no-merge exclude each other")
    if (opts.merge_all or opts.no_merge) and node.combined_queue is None:
        raise UsageError(
            "add-table: --merge-all and --no-merge are for merge leaves (create-leaf --merge)"
        )
    if node.is_root:
        for flag, value in (
            ("--dest-table", opts.dest_table),
            ("--copy-condition", opts.copy_condition),
            ("--create", opts.create),
            ("--copy-node", opts.copy_node),
            ("--copy-mode", opts.copy_mode),
        ):
            if value:
                raise UsageError(f"add-table: {flag} is for branch and leaf nodes only")
        return
    if not handler.needs_table:
        for flag, value in (
            ("--dest-table", opts.dest_table),
            ("--copy-condition", opts.copy_condition),
            ("--create", opts.create),
        ):
            if value:
                raise UsageError(f"add-table: handler {handler.name} keeps no table: no {flag}")
    if opts.trigger_flags or opts.trigger_args:
        raise UsageError(
            "add-table: --trigger-flags and --trigger-arg are for the root"
            " (a subscriber takes its provider's capture)"
        )
    if opts.copy_node and opts.expect_sync:
        raise UsageError("add-table: --copy-node / --find-copy-node and --expect-sync exclude"
                         " each other (no copy)")  # fmt: skip
