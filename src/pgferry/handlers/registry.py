"""Which handlers exist, and turning ``--handler`` / stored table_attrs into handler objects.

Handlers come from three places: the built-ins (:data:`BUILTINS`), the Python entry points
of group ``pgferry.handlers`` of any installed distribution, and the modules named by the
ini setting ``handler_modules``.  An entry point names a Handler subclass or a module; a
module lists its handlers in a ``pgferry_handlers`` attribute.  Which handlers exist is
known per process, as imports are: each worker or command names its config's
``handler_modules`` with :func:`context` (they add to those named before; the imports
happen at the next lookup).  What the handlers a worker or command builds share (its
config, what they keep between batches) is that worker's :class:`HandlerContext`, handed
to :func:`build` and the functions that build: never a global, so that workers run in one
process keep theirs apart.

A table's handler is stored in its ``ferry.table_info.table_attrs`` as ``"handler"``
(absent: ``bulk``) and ``"handler_args"`` (argument name -> text as given, checked).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any

from pgferry import settings
from pgferry.config import Config
from pgferry.errors import ConfigError
from pgferry.handlers.api import Configured, Handler, HandlerContext, HandlerError

log = logging.getLogger(__name__)

DEFAULT = "bulk"
ENTRY_POINT_GROUP = "pgferry.handlers"
MODULE_ATTRIBUTE = "pgferry_handlers"

# Built-in handlers by name: module and class.
BUILTINS = {
    "bulk": "pgferry.handlers.builtin:Bulk",
    "vtable": "pgferry.handlers.builtin:VTable",
    "shard": "pgferry.handlers.shard:Shard",
    "applyfn": "pgferry.handlers.functions:ApplyFn",
    "qsplitter": "pgferry.handlers.queues:QSplitter",
    "dispatch": "pgferry.handlers.dispatch:Dispatch",
    "qtable": "pgferry.handlers.queues:QTable",
    "obfuscate": "pgferry.handlers.obfuscate:Obfuscate",
    "lake": "pgferry.handlers.lake:Lake",
}
# Other names the original accepted for the same handler.
ALIASES = {"fake_local": "vtable", "part": "shard"}


@dataclass(frozen=True)
class Known:
    cls: type[Handler]
    origin: str  # "built-in", "entry point NAME (DIST)", "module NAME"


# The process's catalogue of handler classes (an import is the process's too): the
# modules named so far by every context's handler_modules, and the handlers found, made
# again at the next lookup after a module is added.
_modules: tuple[str, ...] = ()
_known: dict[str, Known] | None = None


def context(config: Config) -> HandlerContext:
    """A new context for the handlers of a worker or command with this ``config``; its
    ``handler_modules`` are added to the catalogue."""
    made = HandlerContext()
    reconfigure(made, config)
    return made


def reconfigure(context: HandlerContext, config: Config) -> None:
    """``context``'s handlers see ``config`` from now on (a worker's reload); its
    ``handler_modules`` are added to the catalogue.  What they keep stays."""
    use_modules(config.get(settings.HANDLER_MODULES))
    context.config = config


def use_modules(names: tuple[str, ...]) -> None:
    """Add these modules' handlers to the catalogue (imported at the next lookup)."""
    global _modules, _known
    added = tuple(n for n in names if n not in _modules)
    if added:
        _modules, _known = _modules + added, None


def forget_modules() -> None:
    """Back to the built-ins and entry points (for tests that named a module)."""
    global _modules, _known
    _modules, _known = (), None


def available() -> dict[str, Known]:
    """Every handler by name, built-ins first."""
    global _known
    if _known is None:
        known: dict[str, Known] = {}
        for name in BUILTINS:
            _add(known, _builtin(name), "built-in")
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist is not None else "?"
            origin = f"entry point {ep.name} ({dist})"
            try:
                _add_all(known, ep.load(), origin)
            except Exception as exc:  # noqa: BLE001 - someone else's package: say, go on
                log.warning("handlers: %s not loaded: %s", origin, exc)
        for name in _modules:
            try:
                module = importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - any import failure is the same to us
                raise ConfigError(f"handler_modules: cannot import {name}: {exc}") from None
            if not hasattr(module, MODULE_ATTRIBUTE):
                raise ConfigError(f"handler_modules: module {name} has no {MODULE_ATTRIBUTE} list")
            _add_all(known, module, f"module {name}", strict=True)
        _known = known
    return _known


def _add_all(known: dict[str, Known], obj: Any, origin: str, strict: bool = False) -> None:
    items = getattr(obj, MODULE_ATTRIBUTE, ()) if isinstance(obj, ModuleType) else [obj]
    for cls in items:
        _add(known, cls, origin, strict)


def _add(known: dict[str, Known], cls: Any, origin: str, strict: bool = True) -> None:
    problem = None
    if not (isinstance(cls, type) and issubclass(cls, Handler)):
        problem = f"{cls!r} is not a pgferry.handlers.Handler subclass"
    elif not cls.name:
        problem = f"{cls.__name__} has no name"
    elif cls.mode == "events" and cls.apply is Handler.apply:
        problem = f"{cls.__name__} takes events but has no apply() of its own"
    elif cls.name in known or cls.name in ALIASES:
        taken = known[cls.name].origin if cls.name in known else "an alias"
        problem = f"handler name {cls.name} is taken ({taken})"
    if problem is None:
        known[cls.name] = Known(cls, origin)
    elif strict:
        raise ConfigError(f"handlers: {origin}: {problem}")
    else:
        log.warning("handlers: %s: %s (ignored)", origin, problem)


def _builtin(name: str) -> type[Handler]:
    module, attr = BUILTINS[name].split(":")
    cls = getattr(importlib.import_module(module), attr)
    assert isinstance(cls, type) and issubclass(cls, Handler), f"{BUILTINS[name]}: no handler"
    assert cls.name == name, f"BUILTINS names {name} for {cls.name}"
    return cls


def lookup(name: str) -> type[Handler]:
    wanted = ALIASES.get(name, name)
    if _known is None and not _modules and wanted in BUILTINS:
        # A built-in wins over any other handler of its name: the others (every built-in
        # module, every installed package's entry points) need not load for it, which
        # would take a tenth of a second of a worker's start.
        return _builtin(wanted)
    known = available()
    found = known.get(wanted)
    if found is None:
        raise HandlerError(
            f"unknown handler: {name} (known: {', '.join(sorted(known))}; "
            "others load through handler_modules or an installed package)"
        )
    return found.cls


def configure(name: str | None, arg_texts: Sequence[str], context: HandlerContext) -> Configured:
    """The handler named on a command line with its ``K=V`` arguments, checked; one
    HandlerError for an unknown handler, an unknown, repeated or missing argument or a
    bad value."""
    if name is None:
        if arg_texts:
            raise HandlerError("--handler-arg needs --handler")
        name = DEFAULT
    cls = lookup(name)
    given: dict[str, str] = {}
    for text in arg_texts:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise HandlerError(f"--handler-arg: expected NAME=VALUE, got {text!r}")
        param = cls.param(key)
        if param is None or param.computed:
            names = ", ".join(p.name for p in cls.params if not p.computed) or "none"
            raise HandlerError(f"handler {cls.name} has no argument {key} (arguments: {names})")
        if param.name in given:
            raise HandlerError(f"handler {cls.name}: argument {param.name} given twice")
        given[param.name] = value
    configured = Configured(cls, given)
    build(configured, context, computed=False)  # types, required arguments, its own checks
    return configured


def build(configured: Configured, context: HandlerContext, *, computed: bool = True) -> Handler:
    """A handler object from checked or stored arguments (HandlerError when wrong), of the
    worker or command whose ``context`` it is given; ``computed=False``: its computed
    arguments are not there yet (before its check)."""
    cls = configured.cls
    typed: dict[str, Any] = {}
    for param in cls.params:
        text = configured.args.get(param.name)
        if text is None:
            if param.required and (computed or not param.computed):
                raise HandlerError(f"handler {cls.name} needs argument {param.name}")
            typed[param.name] = param.default
        else:
            typed[param.name] = param.parse(text, cls.name)
    handler = cls(typed)
    handler.context = context
    try:
        handler.validate()
    except (ValueError, TypeError) as exc:
        raise HandlerError(f"handler {cls.name}: {exc}") from None
    return handler


def with_computed(configured: Configured, values: Mapping[str, str] | None) -> Configured:
    """``configured`` with the computed arguments its check returned for one table."""
    if not values:
        return configured
    cls = configured.cls
    for key in values:
        param = cls.param(key)
        if param is None or not param.computed:
            raise HandlerError(f"handler {cls.name}: check returned {key}, not a computed argument")
    return Configured(cls, {**configured.args, **{k: str(v) for k, v in values.items()}})


def stored(attrs: Mapping[str, Any]) -> Configured:
    """The handler a registry row's table_attrs name (absent: the default)."""
    args = attrs.get("handler_args") or {}
    if not isinstance(args, Mapping):
        raise HandlerError(f"handler_args must be an object, not {args!r}")
    return Configured(lookup(attrs.get("handler") or DEFAULT), {k: str(v) for k, v in args.items()})


def from_attrs(attrs: Mapping[str, Any], context: HandlerContext) -> Handler:
    """The handler object of a registry row's table_attrs."""
    return build(stored(attrs), context)


def build_default(context: HandlerContext) -> Handler:
    """The handler of a table whose table_attrs name none."""
    return build(Configured(lookup(DEFAULT)), context)


def to_attrs(configured: Configured) -> dict[str, Any]:
    """The table_attrs keys that store ``configured``."""
    attrs: dict[str, Any] = {"handler": configured.name}
    if configured.args:
        attrs["handler_args"] = dict(configured.args)
    return attrs


def stores_rows(attrs: Mapping[str, Any]) -> bool:
    """Whether a node whose registry row has these table_attrs holds the table's rows
    (may serve as a copy source).  A handler unknown here counts as storing them."""
    try:
        return lookup(attrs.get("handler") or DEFAULT).needs_table
    except HandlerError:
        return True
