"""``pgferry --ini``: a commented template of every setting.

Without a config file the template of a replication node is printed; given a ticker
config (a ``[pgqd]`` section) the ticker's template.  Values already set in the given file
are filled in, the rest stay commented out with their defaults.
"""

from __future__ import annotations

from pathlib import Path

from pgferry.config import NODE_SECTIONS, TICKER_SECTIONS, load_config
from pgferry.errors import ConfigError
from pgferry.settings import NODE_SETTINGS, TICKER_SETTINGS, Setting


def _render(section: str, settings: list[Setting], have: dict) -> str:
    lines = [f"[{section}]"]
    for key, default, comment in settings:
        lines.append(f"# {comment}")
        if key in have:
            lines.append(f"{key} = {have[key]}")
        elif default is None:
            lines.append(f"{key} = ")
        else:
            lines.append(f"#{key} = {default}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def template_for(path: str | Path | None) -> str:
    """The template for a node config (default) or for the ticker config at ``path``."""
    if path is None:
        return _render("pgferry", NODE_SETTINGS, {})
    try:
        config = load_config(path, NODE_SECTIONS + TICKER_SECTIONS)
    except ConfigError:
        if Path(path).is_file():
            raise
        return _render("pgferry", NODE_SETTINGS, {})
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
