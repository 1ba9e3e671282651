"""The command table: each command's module is imported only when that command runs."""

from __future__ import annotations

import json
import subprocess
import sys

from pgferry.cli import main

PROBE = """
import importlib, json, sys
from pgferry.cli import main
from pgferry.cli.registry import COMMANDS
found = {}
for module in main.COMMAND_MODULES:
    before = set(COMMANDS)
    importlib.import_module(module)
    found[module] = sorted(set(COMMANDS) - before)
print(json.dumps(found))
"""


def _python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60)


def test_table_names_what_each_module_registers() -> None:
    proc = _python("-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found == {m: sorted(names) for m, names in main.COMMAND_MODULES.items()}


def test_help_lists_every_command_and_unknown_ones_fail(cli) -> None:
    res = cli("--help")
    assert res.code == 0
    listed = [line.split()[0] for line in res.out.split("commands:\n", 1)[1].splitlines()]
    assert listed == sorted(main.COMMAND_MODULE)
    res = cli("x.ini", "no-such-command")
    assert res.code != 0 and "unknown command: no-such-command" in res.err


def test_a_command_imports_only_its_own_module(tmp_path) -> None:
    # `diff` with bad input fails after its parser ran: no other command module was loaded.
    code = (
        "import sys; from pgferry.cli import main; rc = main.main(['diff', 'x']);"
        "print(sorted(m for m in sys.modules if m.startswith('pgferry.cli.cmd_')))"
    )
    proc = _python("-c", code)
    assert json.loads(proc.stdout.replace("'", '"')) == ["pgferry.cli.cmd_diff"]
    assert "pgferry diff: the following arguments are required" in proc.stderr
