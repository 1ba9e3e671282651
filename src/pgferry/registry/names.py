"""Table and sequence names as the operator types them, turned into registry names.

The registry stores every name in ``format('%I.%I', schema, name)`` form.  Input may be
quoted (``'"My Schema"."Tbl"'``), unquoted (folded to lower case as PostgreSQL does, but
taken as written when only that spelling exists), without a schema (``public.`` is
assumed) or a glob with ``*`` and ``?`` in unquoted parts.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from pgferry.errors import UsageError

DEFAULT_SCHEMA = "public"


@dataclass(frozen=True)
class NamePart:
    """One dotted component: its text and whether it was double-quoted."""

    text: str
    quoted: bool

    @property
    def is_glob(self) -> bool:
        return not self.quoted and ("*" in self.text or "?" in self.text)

    def spellings(self) -> list[str]:
        """Candidate real names: folded first (PostgreSQL's rule), then as written."""
        if self.quoted:
            return [self.text]
        folded = fold(self.text)
        return [folded] if folded == self.text else [folded, self.text]

    def matches(self, real: str) -> bool:
        if self.quoted:
            return real == self.text
        if self.is_glob:
            return fnmatch.fnmatchcase(real, fold(self.text)) or fnmatch.fnmatchcase(
                real, self.text
            )
        return real in self.spellings()


@dataclass(frozen=True)
class NamePattern:
    """A parsed ``schema.name`` argument (the schema defaults to ``public``)."""

    raw: str
    schema: NamePart
    name: NamePart

    @property
    def is_glob(self) -> bool:
        return self.schema.is_glob or self.name.is_glob

    def matches(self, schema: str, name: str) -> bool:
        return self.schema.matches(schema) and self.name.matches(name)

    def select(self, candidates: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Candidates this pattern names; for a plain name the folded spelling wins."""
        found = [c for c in candidates if self.matches(*c)]
        if self.is_glob or len(found) <= 1:
            return sorted(found)
        for schema in self.schema.spellings():
            for name in self.name.spellings():
                if (schema, name) in found:
                    return [(schema, name)]
        return sorted(found)[:1]


def fold(text: str) -> str:
    """Lower-case ASCII letters only, like PostgreSQL's identifier folding in UTF-8."""
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def split_name(raw: str) -> list[NamePart]:
    """Split at dots outside double quotes; ``""`` inside quotes is one quote."""
    parts: list[NamePart] = []
    buf: list[str] = []
    quoted = False
    was_quoted = False
    i = 0
    while i < len(raw):
        c = raw[i]
        if quoted:
            if c == '"':
                if raw[i + 1 : i + 2] == '"':
                    buf.append('"')
                    i += 2
                    continue
                quoted = False
            else:
                buf.append(c)
        elif c == '"':
            if buf:
                raise UsageError(f"bad name: {raw}")
            quoted = was_quoted = True
        elif c == ".":
            parts.append(_part(raw, buf, was_quoted))
            buf, was_quoted = [], False
        else:
            if was_quoted:
                raise UsageError(f"bad name: {raw}")
            buf.append(c)
        i += 1
    if quoted:
        raise UsageError(f"bad name (unterminated quote): {raw}")
    parts.append(_part(raw, buf, was_quoted))
    return parts


def _part(raw: str, buf: list[str], quoted: bool) -> NamePart:
    text = "".join(buf)
    if not quoted:
        text = text.strip()
    if not text:
        raise UsageError(f"bad name: {raw}")
    return NamePart(text, quoted)


def parse_pattern(raw: str) -> NamePattern:
    parts = split_name(raw.strip())
    if len(parts) == 1:
        return NamePattern(raw, NamePart(DEFAULT_SCHEMA, True), parts[0])
    if len(parts) == 2:
        return NamePattern(raw, parts[0], parts[1])
    raise UsageError(f"bad name (expected schema.name): {raw}")


def split_qualified(fq: str) -> tuple[str, str]:
    """``schema.name`` in ``%I.%I`` form back to its two raw parts."""
    parts = split_name(fq)
    if len(parts) != 2 or any(p.is_glob for p in parts):
        raise UsageError(f"bad qualified name: {fq}")
    return parts[0].text, parts[1].text
