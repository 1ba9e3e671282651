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
error, because running half of what the author meant is worse than stopping
(:func:`applies_here`, with what the node has read from its registry and catalog by
:func:`node_objects`).  In ``Local-*`` scripts, ``@name@`` tags are replaced by the node's
local (quoted) table name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import psycopg

from pgferry.errors import PgferryError, UsageError
from pgferry.registry.names import split_name

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


def qualify_public(name: str) -> str:
    """A header's object name with public's schema when it names none."""
    try:
        parts = split_name(name.strip())
    except UsageError:
        return name
    return f"public.{name.strip()}" if len(parts) == 1 else name


def node_objects(
    conn: psycopg.Connection,
    local_tables: set[str],
    local_names: Mapping[str, str],
    local_seqs: set[str] | frozenset[str] = frozenset(),
) -> NodeObjects:
    """Answer header attribute checks from this node's registry and catalog."""

    def exists(query: str, name: str) -> bool:
        row = conn.execute(query, (name,)).fetchone()
        return bool(row and row[0])

    def function_exists(spec: str) -> bool:
        name, _, nargs = spec.partition("(")
        count = int(nargs.rstrip(")") or 0) if nargs else 0
        row = conn.execute(
            """
            select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
             where (format('%%I.%%I', n.nspname, p.proname) = %s or p.proname = %s)
               and p.pronargs = %s
            """,
            (name.strip(), name.strip(), count),
        ).fetchone()
        return bool(row and row[0])

    def relkind_exists(name: str, kinds: list[str]) -> bool:
        # A bare name in a header is public's, as in the script (not the pinned path's).
        row = conn.execute(
            "select exists (select 1 from pg_class where oid = to_regclass(%s)"
            " and relkind = any(%s))",
            (qualify_public(name), kinds),
        ).fetchone()
        return bool(row and row[0])

    return NodeObjects(
        local_table=lambda n: n in local_tables,
        local_sequence=lambda n: n in local_seqs,
        local_destination=lambda n: (
            n in local_tables and relkind_exists(local_names.get(n, n), ["r", "p"])
        ),
        need_table=lambda n: relkind_exists(n, ["r", "p"]),
        need_sequence=lambda n: relkind_exists(n, ["S"]),
        need_function=function_exists,
        need_view=lambda n: relkind_exists(n, ["v", "m"]),
        need_schema=lambda n: exists(
            "select exists (select 1 from pg_namespace where nspname = %s)", n
        ),
    )


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
