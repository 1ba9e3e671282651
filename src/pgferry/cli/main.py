"""Entry point: ``pgferry [switches] CONFIG.ini COMMAND [ARGS]`` and ``pgferry diff ...``.

Global switches may appear anywhere on the line, as with the original tools; everything
else after the command goes to the command's own parser.  Expected failures
(:class:`~pgferry.errors.PgferryError`) print one line and exit non-zero.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from pathlib import Path

from pgferry import __version__, settings
from pgferry.cli.registry import COMMANDS, Command, Context
from pgferry.config import NODE_SECTIONS, TICKER_SECTIONS, parse_set_options
from pgferry.errors import ConfigError, PgferryError, UsageError

# Where each command is registered: a command's module is imported only when that command
# runs (or for --help, which lists them all), so a run pays only for its own imports.
# tests/cli/test_command_table.py checks this table against the modules' registrations.
COMMAND_MODULES = {
    "pgferry.cli.cmd_queue": ("install", "queues", "consumers"),
    "pgferry.cli.cmd_ticker": ("ticker",),
    "pgferry.cli.cmd_diff": ("diff",),
    "pgferry.cli.cmd_node": (
        "create-root", "create-branch", "create-leaf", "members", "status", "node-info",
    ),
    "pgferry.cli.cmd_tables": (
        "add-table", "remove-table", "tables", "seqs", "missing", "add-seq", "remove-seq",
        "resync", "wait-sync",
    ),
    "pgferry.cli.cmd_handlers": ("show-handlers", "change-handler"),
    "pgferry.cli.cmd_worker": ("worker",),
    "pgferry.cli.cmd_sync": ("compare", "repair"),
    "pgferry.cli.cmd_lake": ("lake-compact",),
    "pgferry.cli.cmd_execute": ("execute",),
    "pgferry.cli.cmd_skip": ("skip-event",),
    "pgferry.cli.cmd_ddl": ("capture-ddl",),
    "pgferry.cli.cmd_grants": ("grants",),
    "pgferry.cli.cmd_cascade": (
        "pause", "resume", "tag-dead", "tag-alive", "drop-node", "change-provider",
        "takeover", "resurrect", "wait-root", "wait-provider",
    ),
}  # fmt: skip
COMMAND_MODULE = {name: module for module, names in COMMAND_MODULES.items() for name in names}

USAGE = """usage: pgferry [switches] CONFIG.ini COMMAND [ARGS]
       pgferry [switches] pgqd.ini ticker
       pgferry diff SRC_CONNSTR SRC_TABLE DST_CONNSTR DST_TABLE
                    [--where COND] [--max-rows N] [--json] [--repair FILE] [--apply]

switches:
  -h, --help      show this help
  -V, --version   print version
  -v, --verbose   more output (repeat for Spark's own log)
  -q, --quiet     warnings and errors only
  -d, --daemon    run in the background (needs pidfile)
  -s, --stop      stop a running daemon after its current loop
  -r, --reload    make a running daemon re-read its config
  -k, --kill      kill a running daemon
  --ini           print a commented config template (--ini ticker: the ticker's)
  --set KEY=VAL   override a config setting

A CONNSTR argument may be @FILE (read from the file) or env:NAME (from the environment
variable), so that no password stands on the command line.
"""

_FLAG_SWITCHES = {
    "-v": "verbose",
    "--verbose": "verbose",
    "-q": "quiet",
    "--quiet": "quiet",
    "-d": "daemon",
    "--daemon": "daemon",
    "-s": "stop",
    "--stop": "stop",
    "-r": "reload",
    "--reload": "reload",
    "-k": "kill",
    "--kill": "kill",
    "--ini": "ini",
    "-h": "help",
    "--help": "help",
    "-V": "version",
    "--version": "version",
}


def load_commands() -> None:
    """Import every command module (for the command list of --help)."""
    for module in COMMAND_MODULES:
        importlib.import_module(module)


def load_command(name: str) -> Command | None:
    """The command ``name``, importing only its own module; None when there is none."""
    module = COMMAND_MODULE.get(name)
    if module is None:
        return None
    importlib.import_module(module)
    return COMMANDS[name]


def split_argv(argv: list[str]) -> tuple[dict[str, int], list[str], list[str], list[str]]:
    """Separate global switches, leading positionals (config, command) and command args."""
    flags: dict[str, int] = {}
    sets: list[str] = []
    positionals: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--set" and i + 1 < len(argv):
            sets.append(argv[i + 1])
            i += 2
            continue
        if token.startswith("--set="):
            sets.append(token[6:])
        elif token in _FLAG_SWITCHES:
            name = _FLAG_SWITCHES[token]
            flags[name] = flags.get(name, 0) + 1
        elif (
            len(token) > 2
            and token[0] == "-"
            and token[1] != "-"
            and all(f"-{c}" in _FLAG_SWITCHES for c in token[1:])
        ):
            for c in token[1:]:
                name = _FLAG_SWITCHES[f"-{c}"]
                flags[name] = flags.get(name, 0) + 1
        elif token.startswith("-") and len(positionals) < 2 and not rest:
            # Before the command only global switches may stand: name the unknown one.
            raise UsageError(f"unknown switch: {token} (see pgferry --help)")
        elif len(positionals) < 2 and not token.startswith("-") and not rest:
            positionals.append(token)
            if positionals[0] == "diff":
                rest.extend(argv[i + 1 :])
                break
        else:
            rest.append(token)
        i += 1
    return flags, sets, positionals, rest


def run(argv: list[str]) -> int:
    flags, sets, positionals, rest = split_argv(argv)
    if flags.get("version"):
        print(f"pgferry {__version__}")
        return 0
    if positionals[:1] == ["diff"]:
        config_path, command_name = None, "diff"
    elif flags.get("help") and len(positionals) < 2:
        print(USAGE)
        load_commands()
        print("commands:")
        for name in sorted(COMMANDS):
            print(f"  {name:<16} {COMMANDS[name].help}")
        return 0
    elif flags.get("ini") and len(positionals) < 2:
        from pgferry.cli.ini_template import template_for

        print(template_for(positionals[0] if positionals else None))
        return 0
    elif len(positionals) == 1 and any(flags.get(s) for s in ("stop", "reload", "kill")):
        # `pgferry dst.ini -s`, as with the original tools: signal whatever runs for it.
        action = next(s for s in ("stop", "reload", "kill") if flags.get(s))
        ctx = Context(config_path=Path(positionals[0]), command=action,
                      overrides=parse_set_options(sets))  # fmt: skip
        try:
            return _signal(ctx, NODE_SECTIONS, action)
        except ConfigError:
            ctx = Context(config_path=Path(positionals[0]), command=action)
            return _signal(ctx, TICKER_SECTIONS, action)
    elif len(positionals) < 2:
        raise UsageError("expected CONFIG.ini COMMAND (see pgferry --help)")
    else:
        config_path, command_name = Path(positionals[0]), positionals[1]
    cmd = load_command(command_name)
    if cmd is None:
        raise UsageError(f"unknown command: {command_name} (see pgferry --help)")
    if flags.get("help"):
        rest = ["--help", *rest]
    ctx = Context(
        config_path=config_path,
        command=command_name,
        verbose=flags.get("verbose", 0),
        quiet=bool(flags.get("quiet")),
        daemon=bool(flags.get("daemon")),
        overrides=parse_set_options(sets),
    )
    for switch in ("stop", "reload", "kill"):
        if flags.get(switch):
            return _signal(ctx, cmd.sections, switch)
    return cmd.func(ctx, rest)


def _signal(ctx: Context, sections: tuple[str, ...], action: str) -> int:
    from pgferry.daemon import signal_running

    config = ctx.config(sections)
    print(signal_running(config.get(settings.PIDFILE), action))
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except PgferryError as exc:
        print(f"pgferry: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("pgferry: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except BrokenPipeError:
        return 0


def entry() -> None:
    """The ``pgferry`` program: :func:`main`, then exit at once when nothing runs beside it.

    The interpreter's teardown costs a short command (a small diff) about a tenth of its time.
    It is skipped only when no other thread runs and PySpark was never loaded (its JVM must
    be stopped by its own exit handlers); log handlers are flushed first.
    """
    code = main()
    if threading.active_count() == 1 and "pyspark" not in sys.modules:
        logging.shutdown()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):
            pass
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    entry()
