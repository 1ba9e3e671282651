"""Command registry: each CLI module registers its commands with :func:`command`.

A command is a function ``(ctx: Context, argv: list[str]) -> int``.  It builds its own
argument parser with :meth:`Context.parser`, whose errors become one-line usage messages.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pgferry.config import NODE_SECTIONS, Config, load_config
from pgferry.errors import UsageError


@dataclass
class Context:
    """What every command gets: the config path, global switches and overrides."""

    config_path: Path | None
    command: str
    verbose: int = 0
    quiet: bool = False
    daemon: bool = False
    overrides: dict[str, str] = field(default_factory=dict)
    _config: Config | None = None

    def config(self, sections: tuple[str, ...] = NODE_SECTIONS) -> Config:
        if self._config is None:
            if self.config_path is None:
                raise UsageError(f"{self.command}: a config file is required")
            self._config = load_config(self.config_path, sections, self.overrides)
        return self._config

    def parser(
        self, usage_args: str = "", description: str | None = None
    ) -> argparse.ArgumentParser:
        prog = f"pgferry CONFIG.ini {self.command}"
        return _Parser(prog=prog, usage=f"{prog} {usage_args}".rstrip(), description=description)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


CommandFunc = Callable[[Context, list[str]], int]


@dataclass(frozen=True)
class Command:
    name: str
    func: CommandFunc
    help: str
    needs_config: bool = True
    sections: tuple[str, ...] = NODE_SECTIONS


COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    help: str,
    *,
    needs_config: bool = True,
    sections: tuple[str, ...] = NODE_SECTIONS,
) -> Callable[[CommandFunc], CommandFunc]:
    def register(func: CommandFunc) -> CommandFunc:
        COMMANDS[name] = Command(name, func, help, needs_config, sections)
        return func

    return register
