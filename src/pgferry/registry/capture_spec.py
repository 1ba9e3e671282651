"""Capture specs: what a table's capture trigger queues, from add-table's trigger options.

:meth:`CaptureSpec.parse` reads ``--trigger-flags`` and ``--trigger-arg`` as the operator
gave them and refuses, in one line each, what pgferry does not do.  :meth:`CaptureSpec.resolve`
checks the result against the table (its columns, the expressions evaluated once on its row
type, read-only) and settles the key: the ``pkey=`` columns, else the primary key, else a
unique index whose columns are all NOT NULL, else none (every column identifies a row).

The resolved spec, as :meth:`CaptureSpec.to_dict` writes it, is the jsonb that
``ferry_queue.attach_capture_spec`` generates the trigger from, that the registry keeps in
``table_attrs["capture"]``, and that subscribers copy from their provider at add-table.
Only ``key`` is always there; every other field is written only when it differs from its
default (``ignore`` [], ``when`` / ``ev_extra2..4`` null, ``backup`` / ``before`` / ``skip``
/ ``no_triggers`` false, ``ops`` "IUD", ``key_from`` "primary key", ``capture`` "row").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import psycopg

from pgferry import expressions
from pgferry.errors import TableError, UsageError
from pgferry.registry import catalog
from pgferry.registry.names import fold, split_qualified

# --trigger-flags letters pgferry takes (docs/nodes.md): I, U, D limit the operations, B and
# A choose a BEFORE or AFTER trigger, S queues without writing locally.
FLAGS = "BAIUDS"
# Londiste's event formats (logutriga, sqltriga, jsontriga); pgferry has one.
FORMAT_FLAGS = "LQJ"
EXTRA_FIELDS = ("ev_extra2", "ev_extra3", "ev_extra4")
# capture=: a row trigger (the default: cheapest for statements of one or two rows) or
# statement triggers (cheapest from a few rows up; docs/events.md, BENCHMARKS.md).
CAPTURE_KINDS = ("row", "statement")
# Trigger arguments of Londiste that pgferry refuses, with the reason.
REFUSED_ARGS = {
    "ev_extra1": "pgferry routes events by ev_extra1, the table's name",
    "ev_type": "replay reads ev_type itself (operation and key)",
    "ev_data": "replay reads ev_data itself (the row as JSON)",
    "deny": "branch and leaf tables refuse writes by themselves",
    "skip_truncate": "use the add-table option --skip-truncate",
    "expect_sync": "use the add-table option --expect-sync",
    "merge_all": "use the add-table option --merge-all on the merge leaf",
    "no_merge": "use the add-table option --no-merge on the merge leaf",
    "virtual_table": "pgferry has no virtual tables",
}
# The placeholders of ferry_queue's capture templates (ferry_queue.attach_capture_spec):
# text that holds one would be rewritten at every rotation.
_PLACEHOLDER = "@@ferry_"


@dataclass(frozen=True)
class CaptureSpec:
    """A table's capture options; ``key`` None until :meth:`resolve` settles it (``()`` =
    the table has no key)."""

    key: tuple[str, ...] | None = None
    key_from: str = ""  # "pkey", "primary key", "unique index NAME" or "none"
    ignore: tuple[str, ...] = ()
    when: str | None = None
    backup: bool = False
    ev_extra2: str | None = None
    ev_extra3: str | None = None
    ev_extra4: str | None = None
    ops: str = "IUD"
    before: bool = False
    skip: bool = False
    no_triggers: bool = False
    capture: str = "row"  # "statement": statement triggers with transition tables

    @property
    def keyless(self) -> bool:
        return self.key == ()

    @property
    def plain(self) -> bool:
        """Nothing but the key (and which operations): the plain capture function of the
        key serves, as without options."""
        bare = replace(self, ops="IUD", no_triggers=False, capture="row")
        return bool(self.key) and bare == CaptureSpec(key=self.key, key_from=self.key_from)

    # --- from the command line ----------------------------------------------------------
    @classmethod
    def parse(
        cls, flags: str | None, args: Sequence[str], *, no_triggers: bool = False
    ) -> CaptureSpec:
        """The spec that ``--trigger-flags=flags`` and ``--trigger-arg`` ``args`` ask for;
        UsageError, with one line, for anything pgferry does not do."""
        fields: dict[str, Any] = {"no_triggers": no_triggers}
        letters = flags or ""
        seen: set[str] = set()
        for arg in args:
            name, has_value, value = arg.partition("=")
            name = name.strip()
            if name in seen:
                raise UsageError(f"add-table: trigger argument {name} given twice")
            seen.add(name)
            if name in REFUSED_ARGS:
                raise UsageError(f"add-table: trigger argument {name} is not supported: "
                                 f"{REFUSED_ARGS[name]}")  # fmt: skip
            if name in ("backup", "skip", "SKIP", "no_triggers"):
                if has_value:
                    raise UsageError(f"add-table: trigger argument {name} takes no value")
                fields[name.lower()] = True
            elif not has_value:
                raise UsageError(f"add-table: unknown trigger argument: {arg}")
            elif name == "pkey":
                fields["key"] = parse_columns(value, "pkey=")
                fields["key_from"] = "pkey"
            elif name == "ignore":
                fields["ignore"] = parse_columns(value, "ignore=")
            elif name == "when":
                fields["when"] = _expression(value, "when=", boolean=True)
            elif name in EXTRA_FIELDS:
                fields[name] = _expression(value, f"{name}=", boolean=False)
            elif name == "capture":
                if value not in CAPTURE_KINDS:
                    raise UsageError(
                        f"add-table: capture={value}: say capture=row or capture=statement"
                    )
                fields["capture"] = value
            elif name == "tgflags":
                letters += value
            else:
                raise UsageError(f"add-table: unknown trigger argument: {arg}")
        fields.update(_flags(letters))
        if fields.get("skip"):
            fields["before"] = True
        if fields.get("backup") and fields.get("ev_extra2"):
            raise UsageError("add-table: backup puts the old row into ev_extra2: no ev_extra2=")
        return cls(**fields)

    # --- against the table --------------------------------------------------------------
    def resolve(self, conn: psycopg.Connection, fq: str) -> CaptureSpec:
        """This spec checked against table ``fq`` (``%I.%I``) with its key settled;
        TableError names the first problem."""
        schema, name = split_qualified(fq)
        columns = [c.name for c in catalog.columns(conn, fq)]
        spec = self._with_key(conn, fq)
        assert spec.key is not None
        for what, names in (("pkey=", spec.key), ("ignore=", spec.ignore)):
            for col in names:
                if col not in columns:
                    raise TableError(f"{what}: no column {col} in table {fq}")
                if _PLACEHOLDER in col:
                    raise TableError(f"{what}: column name {col} is reserved by pgferry")
        for col in spec.ignore:
            if col in spec.key:
                raise TableError(f"ignore=: {col} is a key column of {fq}")
        if len(spec.ignore) == len(columns):
            raise TableError(f"ignore=: no column of {fq} would be left")
        if spec.keyless and spec.ev_extra2:
            raise TableError(
                f"ev_extra2=: {fq} has no key, ev_extra2 carries its old rows (or give pkey=)"
            )
        changes: dict[str, Any] = {}
        if spec.when:
            changes["when"] = expressions.check_on_table(conn, schema, name, spec.when, "when=")
        for field in EXTRA_FIELDS:
            text = getattr(spec, field)
            if text:
                what = f"{field}="
                changes[field] = expressions.check_value_on_table(conn, schema, name, text, what)
        return replace(spec, **changes)

    def _with_key(self, conn: psycopg.Connection, fq: str) -> CaptureSpec:
        if self.key is not None:
            return self if self.key_from else replace(self, key_from="pkey")
        pkey = catalog.primary_key(conn, fq)
        if pkey:
            return replace(self, key=tuple(pkey), key_from="primary key")
        unique = catalog.unique_key(conn, fq)
        if unique:
            return replace(self, key=tuple(unique[1]), key_from=f"unique index {unique[0]}")
        return replace(self, key=(), key_from="none")

    # --- the registry's jsonb -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The jsonb form (see the module docstring); the key must be settled."""
        if self.key is None:
            raise ValueError("capture spec without a key: resolve it first")
        out: dict[str, Any] = {"key": list(self.key)}
        default = CaptureSpec()
        if self.key_from and self.key_from != "primary key":
            out["key_from"] = self.key_from
        if self.ignore:
            out["ignore"] = list(self.ignore)
        optional = ("when", *EXTRA_FIELDS, "backup", "before", "skip", "no_triggers", "ops")
        for field in (*optional, "capture"):
            value = getattr(self, field)
            if value != getattr(default, field):
                out[field] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaptureSpec:
        key = data.get("key")
        return cls(
            key=None if key is None else tuple(key),
            key_from=str(data.get("key_from") or ("primary key" if key else "")),
            ignore=tuple(data.get("ignore") or ()),
            when=data.get("when"),
            backup=bool(data.get("backup")),
            ev_extra2=data.get("ev_extra2"),
            ev_extra3=data.get("ev_extra3"),
            ev_extra4=data.get("ev_extra4"),
            ops=str(data.get("ops") or "IUD"),
            before=bool(data.get("before")),
            skip=bool(data.get("skip")),
            no_triggers=bool(data.get("no_triggers")),
            capture=str(data.get("capture") or "row"),
        )

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> CaptureSpec | None:
        """The spec a registry entry's ``table_attrs`` hold; None for entries made before
        capture specs (their key is the table's primary key)."""
        data = attrs.get("capture")
        return cls.from_dict(data) if isinstance(data, Mapping) else None


def _flags(letters: str) -> dict[str, Any]:
    for ch in letters:
        if ch in FORMAT_FLAGS:
            raise UsageError(
                f"add-table: trigger flag {ch} chooses a Londiste event format; pgferry has"
                " one (docs/events.md)"
            )
        if ch not in FLAGS:
            raise UsageError(f"add-table: unknown trigger flag {ch!r} (known: {', '.join(FLAGS)})")
    out: dict[str, Any] = {}
    if "B" in letters and "A" in letters:
        raise UsageError("add-table: trigger flags B and A contradict each other")
    if "S" in letters and "A" in letters:
        raise UsageError("add-table: trigger flag S needs a BEFORE trigger, not A")
    if "B" in letters:
        out["before"] = True
    if "S" in letters:
        out["skip"] = True
    ops = "".join(op for op in "IUD" if op in letters)
    if ops:
        out["ops"] = ops
    return out


def _expression(text: str, what: str, *, boolean: bool) -> str:
    if _PLACEHOLDER in text:
        raise UsageError(f"add-table: {what} may not contain {_PLACEHOLDER!r}")
    if boolean:
        return expressions.boolean_expression(text, f"add-table: {what}")
    return expressions.one_expression(text, f"add-table: {what}")


def parse_columns(text: str, what: str) -> tuple[str, ...]:
    """Column names as SQL writes them, comma separated: unquoted ones fold to lower case,
    ``"Quoted"`` ones keep case, spaces and commas."""
    names: list[str] = []
    buf: list[str] = []
    quoted = was_quoted = False
    i = 0
    while i <= len(text):
        ch = text[i] if i < len(text) else ","
        if quoted:
            if ch == '"' and text[i + 1 : i + 2] == '"':
                buf.append('"')
                i += 1
            elif ch == '"':
                quoted = False
            elif i == len(text):
                raise UsageError(f"add-table: {what} has an unclosed quote: {text}")
            else:
                buf.append(ch)
        elif ch == '"':
            if "".join(buf).strip():
                raise UsageError(f"add-table: {what} bad column name in {text}")
            buf, quoted, was_quoted = [], True, True
        elif ch == ",":
            name = "".join(buf) if was_quoted else fold("".join(buf).strip())
            if not name or (not was_quoted and any(c.isspace() for c in name)):
                raise UsageError(f"add-table: {what} bad column list: {text!r}")
            if name in names:
                raise UsageError(f"add-table: {what} names {name} twice")
            names.append(name)
            buf, was_quoted = [], False
        elif was_quoted:
            if not ch.isspace():
                raise UsageError(f"add-table: {what} bad column name in {text}")
        else:
            buf.append(ch)
        i += 1
    return tuple(names)
