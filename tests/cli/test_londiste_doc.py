"""docs/londiste.md is true line by line: every table row marked "same" or "differs" names
only commands, switches, settings, trigger options, handlers and SQL functions that exist.

The rows are read from the document itself; each section's names are checked against the
code that defines them: the command table (cli/main.py's COMMAND_MODULES and each command's
own argument parser, through its --help), the global switches, settings.py, the capture
options' parser, the handler registry and the SQL files of the queue.  A row that names
nothing in backquotes (a behaviour, such as "exactly once") has nothing to check.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import re
from pathlib import Path

import pytest

from pgferry.cli import main as cli_main
from pgferry.cli.registry import COMMANDS
from pgferry.errors import PgferryError
from pgferry.handlers import registry as handler_registry
from pgferry.registry.capture_spec import FLAGS, CaptureSpec
from pgferry.settings import ALIASES, BUILTINS, NODE_SETTINGS, TICKER_SETTINGS

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "londiste.md"
SQL_DIR = ROOT / "src" / "pgferry" / "sql"
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def rows() -> list[tuple[str, list[str]]]:
    """(section heading, cells) of every table row marked same or differs."""
    section, found = "", []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            status = re.sub(r"\*", "", cells[-1]).strip()
            if re.match(r"(same|differs)\b", status):
                found.append((section, cells))
    return found


def name_text(cells: list[str]) -> str:
    """The cell(s) naming what the row is about, in pgferry's words."""
    if len(cells) == 2:
        return cells[0]
    ours = cells[1]
    if not ours or ours == "—":
        return cells[0]
    if ours.startswith(("same", "listed", "read", "accepted")):
        return cells[0] + " " + ours  # "same, plus `--timeout=S`": both name it
    return ours


def quoted(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


_options: dict[str, set[str]] = {}


def options_of(command: str) -> set[str]:
    """The switches ``pgferry x.ini COMMAND --help`` lists."""
    if command not in _options:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit, PgferryError):
            cli_main.main(["x.ini", command, "--help"])
        _options[command] = set(OPTION.findall(out.getvalue()))
    return _options[command]


GLOBAL_SWITCHES = set(cli_main._FLAG_SWITCHES) | {"--set"}


def check_commands(text: str) -> list[str]:
    cli_main.load_commands()
    commands: list[str] = []
    problems = []
    for token in quoted(text):
        word = token.split()[0]
        if word.startswith("-"):
            continue
        matched = fnmatch.filter(COMMANDS, word)
        if matched:
            commands += matched
        elif re.fullmatch(r"[a-z]+(-[a-z]+)+", word):
            problems.append(f"no command {word}")
    for paren in re.findall(r"\(([a-z*-]+)\)", text):  # `--nocheck` (create-*)
        commands += fnmatch.filter(COMMANDS, paren)
    known = set(GLOBAL_SWITCHES)
    for command in commands or list(COMMANDS):
        known |= options_of(command)
    for token in quoted(text):
        for option in OPTION.findall(token):
            if option.startswith("--*"):
                continue
            if option not in known:
                where = ", ".join(commands) or "any command"
                problems.append(f"no switch {option} ({where})")
    return problems


def check_switches(text: str) -> list[str]:
    return [
        f"no global switch {o}"
        for t in quoted(text)
        for o in OPTION.findall(t)
        if o not in GLOBAL_SWITCHES
    ]


def check_settings(text: str, ticker: bool) -> list[str]:
    settings = TICKER_SETTINGS if ticker else NODE_SETTINGS
    known = {s.key for s in settings} | set(ALIASES) | BUILTINS
    problems = []
    for token in quoted(text):
        if token.startswith("-"):
            problems += check_switches(f"`{token}`")
            continue
        name = token.split("=")[0].strip()
        if not re.fullmatch(r"[a-z_]+[a-z0-9_]*|spark\.\*", name):
            continue  # a value, a section or a format, not a key
        if name not in known and not name.startswith("spark."):
            problems.append(f"no setting {name}")
    return problems


def check_trigger_options(text: str) -> list[str]:
    problems = []
    for token in quoted(text.split("(")[0]):  # what follows in parentheses is explanation
        if token.startswith("--trigger-"):
            continue
        if re.fullmatch(r"[A-Z]", token):
            if token not in FLAGS:
                problems.append(f"no trigger flag {token}")
            continue
        name, has_value, _ = token.partition("=")
        if not re.fullmatch(r"[a-z_0-9]+", name):
            continue
        try:
            CaptureSpec.parse(None, (f"{name}=a" if has_value else name,))
        except PgferryError as exc:
            problems.append(f"trigger argument {token}: {exc}")
    return problems


def check_handlers(text: str, status: str) -> list[str]:
    """The original's handler names (its arguments follow in parentheses) exist here, or a
    row that differs names the handler used instead (``the default is `bulk` ``)."""

    def missing(names: list[str]) -> list[str]:
        out = []
        for name in names:
            try:
                handler_registry.lookup(name)
            except PgferryError:
                out.append(name)
        return out

    problems = missing(quoted(text.split("(")[0]))
    instead = quoted(status)[:1]
    if problems and status.startswith("differs") and instead and not missing(instead):
        return []
    return [f"no handler {name}" for name in problems]


def check_sql(text: str) -> list[str]:
    source = "\n".join(p.read_text(encoding="utf-8") for p in SQL_DIR.rglob("*.sql"))
    problems = []
    for token in quoted(text):
        found = re.match(r"(?:[a-z_]+\.)?([a-z_0-9]+)\(", token)
        if found and not re.search(rf"function\s+ferry_queue\.{found[1]}\s*\(", source, re.I):
            problems.append(f"no SQL function ferry_queue.{found[1]}")
    return problems


def check(section: str, cells: list[str]) -> list[str]:
    text = name_text(cells)
    if section == "Global switches":
        return check_switches(text)
    if section in ("Node commands", "Table and sequence commands", "The worker"):
        return check_commands(text)
    if section == "add-table options":
        return check_commands("`add-table` " + text)
    if section == "Ini settings of a node":
        return check_settings(text, ticker=False)
    if section.startswith("pgqd settings"):
        return check_settings(text, ticker=True)
    if section == "Trigger flags and arguments":
        return check_trigger_options(text)
    if section == "Handlers":
        return check_handlers(text, cells[-1])
    if section == "The PgQ SQL API":
        return check_sql(cells[1] if cells[1] not in ("same", "") else cells[0])
    return [f"section {section!r} is not known to this test"]


def test_rows_are_found() -> None:
    sections = {s for s, _ in rows()}
    assert len(rows()) > 100
    assert {"Global switches", "Node commands", "add-table options", "Handlers"} <= sections


@pytest.mark.parametrize("section,cells", rows(), ids=lambda v: v if isinstance(v, str) else "")
def test_row_names_what_exists(section: str, cells: list[str]) -> None:
    problems = check(section, cells)
    assert not problems, f"{section}: {cells[0]}: {'; '.join(problems)}"
