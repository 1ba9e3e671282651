"""Every default is declared once for the reader: the default a module passes when it reads an
ini key (``config.getint("parallel_copies", 1)``) is the one ``settings.py`` declares for
``pgferry --ini``.

The modules are read as source (every ``config.get*("key", default)`` call with a literal
key), the default evaluated in its module's namespace, and both parsed as the getter would;
nothing is imported from a database or Spark.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import pgferry
from pgferry import settings
from pgferry.apply.worker_settings import ReplaySettings, WorkerSettings
from pgferry.config import Config
from pgferry.queue.ticker_settings import TickerSettings

pytestmark = pytest.mark.pure

SRC = Path(pgferry.__file__).parent
GETTERS = {"get", "getint", "getfloat", "getbool"}
# The modules that read the ticker's [pgqd] section; every other one reads a node's.
TICKER_MODULES = {"queue/ticker_settings.py", "cli/cmd_ticker.py"}
# Reads whose default differs from the declared one on purpose, each documented.
DIFFERENT = {
    # compare's wait when neither compare_wait nor lock_timeout is set: 60 s, not the lock
    # wait of add-table (docs/replication.md, "default lock_timeout, else 60").
    ("apply/sync.py", "lock_timeout"),
}


def _declared(ticker: bool) -> dict[str, str | None]:
    return {key: default for key, default, _ in (settings.TICKER_SETTINGS if ticker
            else settings.NODE_SETTINGS)}  # fmt: skip


def _parse(getter: str, raw: str) -> object:
    values = {"k": raw} if raw != "" or getter == "get" else {}
    config = Config(Path("x.ini"), "pgferry", values)
    return getattr(config, getter)("k", _FALLBACK[getter])


# What a getter returns for a key set to "": getbool's False, the others' value as given.
_FALLBACK: dict[str, object] = {"get": "", "getint": 0, "getfloat": 0.0, "getbool": False}


def _reads() -> list[tuple[str, int, str, str, object]]:
    """(module, line, getter, key, default value) of every literal read with a default."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("testing/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = None
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in GETTERS
                and "config" in ast.unparse(node.func.value).lower()
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                continue
            default = node.args[1]
            if isinstance(default, ast.Call):  # another setting's value: read on its own
                continue
            if module is None:
                name = "pgferry." + rel.removesuffix(".py").replace("/", ".")
                module = importlib.import_module(name.removesuffix(".__init__"))
            value = eval(compile(ast.Expression(default), rel, "eval"), vars(module))
            found.append((rel, node.lineno, node.func.attr, node.args[0].value, value))
    return found


READS = _reads()


def test_the_scan_finds_the_readers() -> None:
    """The scan sees the worker's, the ticker's and the log's reads (else it checks nothing)."""
    modules = {rel for rel, *_ in READS}
    assert {"apply/worker_settings.py", "queue/ticker_settings.py", "log.py"} <= modules
    assert len(READS) > 30


@pytest.mark.parametrize(
    ("rel", "line", "getter", "key", "default"),
    READS,
    ids=[f"{rel}:{line}:{key}" for rel, line, _, key, _ in READS],
)
def test_read_default_is_the_declared_one(
    rel: str, line: int, getter: str, key: str, default: object
) -> None:
    ticker = rel in TICKER_MODULES
    declared = _declared(ticker)
    key = settings.ALIASES.get(key, key)
    if key in settings.BUILTINS:  # set by the ini's reader itself (config_dir, job_name...)
        return
    assert key in declared, f"{rel}:{line} reads '{key}', which settings.py does not declare"
    text = declared[key]
    if text is None or text.startswith("(") or (rel, key) in DIFFERENT:
        return  # required, or a default computed from another setting
    expected = _parse(getter, text)
    got = _parse(getter, str(default)) if getter != "getbool" else default
    assert got == expected, (
        f"{rel}:{line}: '{key}' defaults to {default!r}, settings.py says {text!r}"
    )


def _config(values: dict[str, str], section: str = "pgferry") -> Config:
    return Config(Path("node.ini"), section, values)


def test_worker_settings_of_an_empty_ini_are_the_declared_defaults() -> None:
    """A node ini with only the required keys gives the same worker settings as one that
    writes every declared default out."""
    required = {"db": "dbname=x", "queue_name": "q"}
    written = {
        key: default
        for key, default, _ in settings.NODE_SETTINGS
        if default is not None and not default.startswith("(") and not key.startswith("spark.")
    }
    assert WorkerSettings.from_config(_config(required)) == WorkerSettings.from_config(
        _config({**written, **required})
    )
    assert ReplaySettings.from_config(_config({})) == ReplaySettings.from_config(_config(written))


def test_ticker_settings_of_an_empty_ini_are_the_declared_defaults() -> None:
    required = {"base_connstr": "host=127.0.0.1"}
    written = {key: default for key, default, _ in settings.TICKER_SETTINGS if default is not None}
    empty = TickerSettings.from_config(_config(required, "pgqd"))
    assert empty == TickerSettings.from_config(_config({**written, **required}, "pgqd"))
    assert empty == TickerSettings(base_connstr="host=127.0.0.1")  # the dataclass's own
