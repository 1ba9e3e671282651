"""Header attributes of SQL scripts run through ``execute``.

A script may start with lines ``--*-- Key: value, value`` (a trailing comma continues the
value on the next attribute line).  They say on which nodes the script applies:

=====================  ==========================================================
``Local-Table``        the table is replicated on this node
``Local-Sequence``     the sequence is replicated on this node
``Local-Destination``  the table is replicated and its local table exists
``Need-Table``         the table exists physically
``Need-Sequence``      the sequence exists
``Need-Function``      ``name(nargs)`` exists (nargs defaults to 0)
``Need-View``          the view exists
``Need-Schema``        the schema exists
=====================  ==========================================================

All listed objects present: the script runs; none: it is skipped on this node; a mix is an
error, because running half of what the author meant is worse than stopping.  In
``Local-*`` scripts, ``@name@`` tags are replaced by the node's local (quoted) table name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pgferry.errors import PgferryError

KNOWN_KEYS = (
    "local-table",
    "local-sequence",
    "local-destination",
    "need-table",
    "need-sequence",
    "need-function",
    "need-view",
    "need-schema",
)
_ATTR_LINE = re.compile(r"^--\*--\s*(.*)$")


class ScriptAttrError(PgferryError):
    """A malformed header, or a header that only partly matches this node."""


@dataclass
class ScriptAttrs:
    """Parsed header: key (lower case) -> list of object names."""

    values: dict[str, list[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.values)

    def to_text(self) -> str:
        """Stable text form carried with the queued event."""
        return "\n".join(f"{key}: {', '.join(names)}" for key, names in sorted(self.values.items()))

    @classmethod
    def from_text(cls, text: str | None) -> ScriptAttrs:
        if not text:
            return cls()
        return parse_attrs("\n".join(f"--*-- {line}" for line in text.splitlines()))


def parse_attrs(script: str) -> ScriptAttrs:
    """Read the attribute header at the top of ``script`` (stops at the first SQL line)."""
    attrs = ScriptAttrs()
    pending_key: str | None = None
    for raw in script.splitlines():
        line = raw.strip()
        match = _ATTR_LINE.match(line)
        if match:
            body = match.group(1).strip()
            if pending_key is not None:
                key, value = pending_key, body
            else:
                key, sep, value = body.partition(":")
                if not sep:
                    if not body:
                        continue
                    raise ScriptAttrError(f"bad attribute line: {raw.strip()}")
                key = key.strip().lower()
                if key not in KNOWN_KEYS:
                    raise ScriptAttrError(f"unknown attribute: {key}")
            names = [v.strip() for v in value.split(",") if v.strip()]
            attrs.values.setdefault(key, []).extend(names)
            pending_key = key if value.rstrip().endswith(",") else None
            continue
        if not line or line.startswith("--"):
            continue
        break
    return attrs


@dataclass(frozen=True)
class NodeObjects:
    """What the deciding node has; each callable answers for one object name."""

    local_table: Callable[[str], bool]
    local_sequence: Callable[[str], bool]
    local_destination: Callable[[str], bool]
    need_table: Callable[[str], bool]
    need_sequence: Callable[[str], bool]
    need_function: Callable[[str], bool]
    need_view: Callable[[str], bool]
    need_schema: Callable[[str], bool]


def applies_here(attrs: ScriptAttrs, objects: NodeObjects) -> bool:
    """True: run; False: skip on this node; raises when the header matches only partly."""
    if not attrs:
        return True
    results: list[bool] = []
    for key, names in attrs.values.items():
        check = getattr(objects, key.replace("-", "_"))
        results.extend(check(name) for name in names)
    if all(results):
        return True
    if not any(results):
        return False
    raise ScriptAttrError("SQL only partially matches local setup")


def replace_tags(script: str, local_names: Mapping[str, str]) -> str:
    """Replace ``@name@`` by the local quoted name of ``name`` (only names we know)."""

    def sub(match: re.Match[str]) -> str:
        return local_names.get(match.group(1), match.group(0))

    return re.sub(r"@([^@\s]+)@", sub, script)
