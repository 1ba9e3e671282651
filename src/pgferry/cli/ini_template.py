"""``pgferry --ini``: a commented template of every setting.

``pgferry --ini`` (or ``pgferry --ini node``) prints the template of a replication node,
``pgferry --ini ticker`` the ticker's (``[pgqd]``).  Given a config file, the template of
its kind with the values already set in it filled in, the rest commented out with their
defaults.  A file that does not exist is an error (a misspelt name must not look like a
fresh template).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pgferry.config import NODE_SECTIONS, TICKER_SECTIONS, load_config
from pgferry.errors import ConfigError
from pgferry.settings import NODE_SETTINGS, TICKER_SETTINGS, Setting


def _render(section: str, settings: Sequence[Setting[Any]], have: dict[str, str]) -> str:
    lines = [f"[{section}]"]
    for setting in settings:
        key, default = setting.key, setting.default_text
        lines.append(f"# {setting.comment}")
        if key in have:
            lines.append(f"{key} = {have[key]}")
        elif default is None or setting.ask:
            lines.append(f"{key} = {default or ''}")
        else:
            lines.append(f"#{key} = {default}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# Names ``--ini`` takes instead of a file: the empty template of that kind.
KINDS = {"node": ("pgferry", NODE_SETTINGS), "ticker": ("pgqd", TICKER_SETTINGS)}


def template_for(path: str | Path | None) -> str:
    """The template for a node (default), the ticker (``ticker``) or the config at ``path``."""
    if path is None:
        path = "node"
    if str(path) in KINDS and not Path(path).exists():
        section, settings = KINDS[str(path)]
        return _render(section, settings, {})
    if not Path(path).is_file():
        kinds = " or ".join(KINDS)
        raise ConfigError(f"--ini: no such file: {path} (or give {kinds} for an empty template)")
    config = load_config(path, NODE_SECTIONS + TICKER_SECTIONS)
    raw = _raw_values(Path(path), config.section)
    if config.section in TICKER_SECTIONS:
        return _render(config.section, TICKER_SETTINGS, raw)
    return _render(config.section, NODE_SETTINGS, raw)


def _raw_values(path: Path, section: str) -> dict[str, str]:
    """Settings as written in the file (interpolation left as it is)."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment]
    parser.read(path, encoding="utf-8")
    return dict(parser.items(section)) if parser.has_section(section) else {}
