"""The handler plugin API: what a table's handler declares and what replay hands it.

A handler decides what one table's events do on one node (``add-table --handler=NAME``):
how the rows of a batch are applied, which rows the initial copy takes and whether there is
a copy at all, whether the node needs a local table, and what a branch passes on.  It fits
the set-based replay: a handler never sees events one by one from Python.  Replay stages
the table's part of a batch in a temporary table of the apply transaction and calls
:meth:`Handler.apply` once with it (:class:`Staged`); the handler applies it with SQL of its
own, in that transaction.  ``docs/handlers.md`` is the guide; this module is the contract.

Two stage forms (:attr:`Handler.mode`):

* ``"rows"``: the table's rows collapsed per primary key (the last event of each key), as
  ``(op, col1, col2, ...)`` with the destination's column types; op is ``I`` (insert),
  ``U`` (upsert) or ``D`` (delete by key), ``d`` (delete of a key inserted in the same
  rows).  A TRUNCATE of the source truncates the destination first (:attr:`truncates`).
* ``"events"``: every event of the table, uncollapsed, in ev_id order, with the columns of
  :data:`EVENT_COLUMNS` (TRUNCATE events included as ``ev_type = 'R'``).

Everything here runs on the driver (the worker's process); nothing is sent to Spark.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import psycopg

from pgferry import settings
from pgferry.errors import UsageError

# Columns of an "events" stage, in order, with their types (the event vocabulary's).
from pgferry.events import EVENT_COLUMNS as EVENT_COLUMNS
from pgferry.handlers import upsert

# The data a handler is handed and returns lives one module down, where the set-based
# applies read it without importing this one; handler authors take it from here.
from pgferry.handlers.staged import Applied as Applied
from pgferry.handlers.staged import Mode as Mode
from pgferry.handlers.staged import Staged as Staged
from pgferry.handlers.staged import Target as Target

if TYPE_CHECKING:
    from pgferry.config import Config


class HandlerError(UsageError):
    """A handler or its arguments are wrong (unknown name or argument, bad value)."""


S = TypeVar("S")


class HandlerContext:
    """What the handlers one worker or command builds share: the node's ini (``config``;
    the worker replaces it when it reloads) and what handlers keep between batches, one
    object per kind (:meth:`state`: the lake handler's parts, the dispatch handler's last
    retention runs).  Each worker has its own, so that workers run in one process (as
    ``testing/cascade.Runner`` runs them, in threads) share nothing of it."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config
        self._states: dict[type, object] = {}

    def state(self, kind: type[S]) -> S:
        """The one ``kind()`` of this context, made at its first use."""
        found = self._states.get(kind)
        if found is None:
            # setdefault: two threads of one worker making it at once keep the same one.
            found = self._states.setdefault(kind, kind())
        assert isinstance(found, kind)
        return found


@dataclass(frozen=True)
class Param:
    """One declared handler argument (``--handler-arg NAME=VALUE``).

    ``kind`` is ``str``, ``int`` or ``bool`` (0/1, true/false, yes/no, on/off);
    ``choices`` limits a text value; ``aliases`` are other names accepted for it (stored
    under ``name``).  An argument without a default and not ``required`` is None when
    not given.
    """

    name: str
    doc: str
    kind: type = str
    default: Any = None
    required: bool = False
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    # Set by :meth:`Handler.check` (stored with the table), never given on a command line:
    # what the handler read from files or databases at add-table, so that it is built
    # later from the registry alone, without I/O.
    computed: bool = False

    def parse(self, text: str, handler: str) -> Any:
        """The typed value of ``text``; HandlerError naming the argument otherwise."""
        what = f"handler {handler}: argument {self.name}"
        if self.kind is bool:
            if text.strip():  # an empty value is no answer here, unlike an empty ini key
                try:
                    return settings.parse_bool(text)
                except settings.BadValue:
                    pass
            raise HandlerError(f"{what} must be 0 or 1 (true/false), not {text!r}")
        if self.kind is int:
            try:
                return int(text.strip())
            except ValueError:
                raise HandlerError(f"{what} must be an integer, not {text!r}") from None
        if self.choices and text not in self.choices:
            raise HandlerError(f"{what} must be one of {', '.join(self.choices)}, not {text!r}")
        if self.required and not text.strip():
            raise HandlerError(f"{what} must not be empty")
        return text

    def usage(self) -> str:
        """``name``, ``name=default`` or ``[name]`` as show-handlers lists it."""
        if self.required:
            return self.name
        if self.default is None:
            return f"[{self.name}]"
        default = int(self.default) if self.kind is bool else self.default
        return f"{self.name}={default}"


@dataclass(frozen=True)
class TableCheck:
    """What :meth:`Handler.check` may look at when ``add-table`` or ``change-handler``
    attaches the table (inside that command's transaction: change nothing)."""

    conn: psycopg.Connection  # the local database
    provider: psycopg.Connection | None  # the provider (None on a root)
    table_name: str  # queue-visible name, ``%I.%I``
    columns: tuple[str, ...] | None  # the source table's columns (None: unknown)
    pk: tuple[str, ...]  # the source table's primary key (empty when unknown)
    node_type: str  # root, branch or leaf
    queue: str
    dest: str | None = None  # the local table, ``%I.%I`` (None: the handler keeps none)
    expect_sync: bool = False  # add-table --expect-sync: no copy was asked for
    node_name: str = ""  # the local node's name
    # (name, table_attrs) of every table the database's registry holds, of every queue:
    # what a handler may check the table against (two tables writing one target).
    registered: tuple[tuple[str, Mapping[str, Any]], ...] = ()


@dataclass(frozen=True)
class Event:
    """One event a branch forwards, for :meth:`Handler.forward_event`: the columns it
    passes on (no ev_txid: events take the branch's own writing transaction's)."""

    ev_id: int
    ev_time: Any
    ev_retry: int | None
    ev_type: str | None
    ev_data: str | None
    ev_extra1: str | None
    ev_extra2: str | None
    ev_extra3: str | None
    ev_extra4: str | None


class Handler:
    """Base class of every handler; the default behaviour of each hook is that of ``bulk``.

    A subclass sets :attr:`name`, documents itself in its docstring (the first line is
    the summary ``show-handlers`` lists) and declares its arguments in :attr:`params`.  It
    is built once per table and node from the stored arguments, typed and checked
    (:meth:`__init__` then :meth:`validate`), whenever the registry is read: keep
    construction cheap and free of I/O.
    """

    name: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    mode: ClassVar[Mode] = "rows"
    # False: no local table is needed (none is looked up, no copy, state ok at once) and
    # the node holds no rows of the table, so it is never a copy source for it.
    needs_table: ClassVar[bool] = True
    # May be used on a root (where nothing is replayed: only capture options count).
    on_root: ClassVar[bool] = False
    # On a root: the table's changes are captured (it must exist; triggers attached).
    captures: ClassVar[bool] = True
    # On a leaf: the local table only gives the shape of the rows (the lake handler's):
    # add-table makes it from the source's definition when missing, without --create.
    makes_table: ClassVar[bool] = False

    # Set by the registry when it builds the handler (handlers/registry.py build).
    _context: HandlerContext | None = None

    def __init__(self, args: Mapping[str, Any]) -> None:
        self.args: dict[str, Any] = dict(args)

    @property
    def context(self) -> HandlerContext:
        """The context of the worker or command that built the handler (one of its own
        when built without one)."""
        if self._context is None:
            self._context = HandlerContext()
        return self._context

    @context.setter
    def context(self, context: HandlerContext) -> None:
        self._context = context

    @property
    def config(self) -> Config | None:
        """The node's ini settings when the handler is built by a command or the worker
        (None otherwise, e.g. in show-handlers); read them when used, not at construction."""
        return self.context.config

    @classmethod
    def summary(cls) -> str:
        """The first line of the docstring."""
        doc = inspect.getdoc(cls) or ""
        return doc.splitlines()[0] if doc else ""

    @classmethod
    def param(cls, name: str) -> Param | None:
        for p in cls.params:
            if name == p.name or name in p.aliases:
                return p
        return None

    # --- checks -----------------------------------------------------------------------------
    def validate(self) -> None:
        """Checks across arguments (raise HandlerError); no database at hand."""

    def check(self, table: TableCheck) -> Mapping[str, str] | None:
        """Checks against the databases at ``add-table``/``change-handler`` (raise
        HandlerError or TableError): a column that must exist, a function, a queue.

        May return the values of its ``computed`` arguments for this table (texts), stored
        beside the given ones: what it read from a file or a catalog, so that replay builds
        it from the registry without I/O and works with what was checked."""
        return None

    # --- the copy -----------------------------------------------------------------------
    @property
    def copies(self) -> bool:
        """Whether the table gets an initial copy; False: state ok at once (as with
        ``--expect-sync``)."""
        return self.needs_table

    @property
    def chunked_copy(self) -> bool:
        """Whether the copy may be made in key-range chunks, each in its own short
        transaction (:mod:`pgferry.node.copymode`).  Replay then applies events that the
        chunks may already hold: only the default apply, the upsert and delete of full row
        images by key, is idempotent so (``bulk``, ``shard``); a handler with its own
        :meth:`apply` keeps the one-snapshot copy."""
        return (
            self.mode == "rows"
            and self.copies
            and self.replays
            and type(self).apply is Handler.apply
            and type(self).truncated is Handler.truncated
        )

    def row_filter(self) -> str | None:
        """A boolean SQL expression over the SOURCE table's columns, or None.

        The copy takes only rows passing it; replay evaluates it on each event's row image
        (decoded as the source's row type, on the provider).  When it names primary-key
        columns only, events failing it are skipped (their key can never be here);
        otherwise an image failing it becomes a delete of its key (a row that left it).
        ``compare`` applies it to the source side.
        """
        return None

    def column_exprs(self) -> Mapping[str, str]:
        """Destination column -> SQL expression over the SOURCE table's columns, computed
        on the source instead of the column's own value, by the copy and by replay.  An
        expression on a key column must be deterministic and one-to-one."""
        return {}

    def copy_column_exprs(self) -> Mapping[str, str]:
        """The copy's column expressions (default: :meth:`column_exprs`).  A handler that
        computes columns in its own :meth:`apply` (on the stage) gives the copy's here."""
        return self.column_exprs()

    def copy_columns(self) -> Sequence[str] | None:
        """The only destination columns the copy writes (the others get their defaults);
        None: every column both tables have."""
        return None

    def copy_settings(self) -> Mapping[str, str]:
        """Custom settings (``prefix.name`` -> text) set locally in the copy's source
        transaction before its SELECT, for the expressions to read with
        ``current_setting()``.  Sent as query parameters, never in the statement text, and
        never logged: fit for a secret."""
        return {}

    # --- replay -------------------------------------------------------------------------
    @property
    def replays(self) -> bool:
        """False: the table's events are not read at all (still forwarded by a branch)."""
        return True

    @property
    def truncates(self) -> bool:
        """Rows mode: a TRUNCATE of the source truncates the destination."""
        return True

    def apply(self, staged: Staged) -> Applied:
        """Apply the staged rows or events (see :class:`Staged`)."""
        return upsert.apply_rows(staged)

    def truncated(self, conn: psycopg.Connection, target: Target, tick_id: int) -> None:
        """Rows mode: the source was truncated and the local table has just been, in the
        apply transaction of the batch ending at ``tick_id``; a handler that keeps rows
        elsewhere empties them here (nothing by default)."""

    # --- forwarding on a branch ---------------------------------------------------------
    # True: a branch passes on the table's row events through row_filter (skipped, or
    # turned into deletes, as replay treats them): its subscribers see only its rows.
    forward_filtered: ClassVar[bool] = False

    def forward_event(self, event: Event) -> Event | None:
        """Rewrite (return another Event) or drop (None) one forwarded event of the table.

        Called only when a subclass overrides it, once per event of the table in ev_id
        order, after ``forward_filtered``; keep ev_id unchanged.
        """
        return event

    def rewrites_forwarded(self) -> bool:
        return type(self).forward_event is not Handler.forward_event

    # --- capture on a root --------------------------------------------------------------
    def capture_options(self) -> tuple[str | None, Sequence[str]]:
        """(trigger flags, trigger args) this handler adds to the root's capture, as
        ``--trigger-flags`` / ``--trigger-arg`` would."""
        return None, ()


@dataclass(frozen=True)
class Configured:
    """A handler chosen for a table: its class, and its arguments as stored."""

    cls: type[Handler]
    args: dict[str, str] = field(default_factory=dict)  # canonical name -> text

    @property
    def name(self) -> str:
        return self.cls.name
