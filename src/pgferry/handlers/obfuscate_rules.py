"""The ``obfuscate`` handler's rule file and the SQL that each rule becomes.

A rule file is YAML: tables (``schema.table``; a bare name means ``public``) mapping their
columns to a rule.  A rule is one of :data:`RULES`, or a mapping, which makes the column a
JSON object whose listed keys get those rules (nested mappings for nested objects; keys not
listed are dropped)::

    public.users:
      id: keep
      email: hash
      phone: skip
      profile:
        name: hash
        address:
          city: keep

Each rule becomes one SQL expression of the column's value, the same text for the copy
(over the source's row, on the provider) and for replay (over the stage, on this node).
Hashes are HMAC-SHA256 with the node's ``obfuscator_key``, computed in plain SQL with
``sha256()`` (PostgreSQL 11+, no pgcrypto): HMAC(K, m) = sha256((K xor opad) ||
sha256((K xor ipad) || m)).  The two padded keys are computed here, in Python, and reach
the server only as values of the custom settings :data:`IPAD` and :data:`OPAD`, set by
parameter in the transaction that uses them: never in a statement's text.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from psycopg import sql

from pgferry.handlers.api import HandlerError

RULES = ("keep", "skip", "hash", "hash32", "hash64", "bool")
IPAD, OPAD = "pgferry.obfuscate_ipad", "pgferry.obfuscate_opad"
BLOCK = 64  # SHA-256's block size, in bytes

Rule = str | dict[str, Any]  # a name of RULES, or {json key: Rule}

# Which column types each rule may write (format_type() text; a prefix for those with a
# length or precision).
_STRINGS = ("text", "character varying", "character")
_TYPES: dict[str, tuple[str, ...]] = {
    "hash": _STRINGS,
    "hash32": ("integer", "bigint", "numeric"),
    "hash64": ("bigint", "numeric"),
    "bool": ("boolean", *_STRINGS),
    "json": ("json", "jsonb"),
}
# Rules that may touch a key: deterministic and one-to-one (as far as a hash is).
KEY_RULES = ("keep", "hash", "hash64")


def pads(key: str) -> tuple[str, str]:
    """(K xor ipad, K xor opad) in hex: what the settings IPAD and OPAD hold."""
    raw = key.encode()
    if len(raw) > BLOCK:
        raw = hashlib.sha256(raw).digest()
    raw = raw.ljust(BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in raw).hex(), bytes(b ^ 0x5C for b in raw).hex()


def key_id(key: str) -> str:
    """A short fingerprint of the key (an HMAC of a fixed text: it tells nothing of the
    key), stored with the table to notice a key that changed."""
    return hmac.new(key.encode(), b"pgferry obfuscator key", hashlib.sha256).hexdigest()[:16]


def load(path: str) -> dict[str, Any]:
    """The rule file's tables; HandlerError with one line when it cannot be read."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise HandlerError(f"obfuscate: cannot read rule file {path}: {exc.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(exc, "problem", None) or "not YAML"
        raise HandlerError(f"obfuscate: rule file {path}{line}: {problem}") from None
    if not isinstance(doc, dict):
        raise HandlerError(f"obfuscate: rule file {path} must map tables to their columns")
    return doc


def table_rules(doc: Mapping[str, Any], schema: str, name: str, path: str) -> dict[str, Rule]:
    """The rules of one table, checked (HandlerError naming what is wrong)."""
    spellings = {f"{schema}.{name}", _quoted(schema, name)}
    if schema == "public":
        spellings.add(name)
    found = [k for k in doc if isinstance(k, str) and k.strip() in spellings]
    if not found:
        raise HandlerError(f"obfuscate: rule file {path} has no rules for {schema}.{name}")
    if len(found) > 1:
        raise HandlerError(f"obfuscate: rule file {path} names {schema}.{name} twice")
    columns = doc[found[0]]
    what = f"obfuscate: {path}: {found[0]}"
    if not isinstance(columns, dict) or not columns:
        raise HandlerError(f"{what} must map its columns to rules")
    return {str(col): _checked(rule, f"{what}.{col}") for col, rule in columns.items()}


def _quoted(schema: str, name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))


def _checked(rule: Any, what: str) -> Rule:
    if isinstance(rule, dict):
        if not rule:
            raise HandlerError(f"{what}: a JSON rule needs the rules of its keys")
        return {str(k): _checked(v, f"{what}.{k}") for k, v in rule.items()}
    if not isinstance(rule, str) or rule not in RULES:
        raise HandlerError(
            f"{what}: unknown rule {rule!r} (rules: {', '.join(RULES)}, or a mapping for JSON)"
        )
    return rule


def kind(rule: Rule) -> str:
    return "json" if isinstance(rule, dict) else rule


def fits(rule: Rule, type_text: str) -> bool:
    """Whether ``rule`` can write a column of type ``type_text`` (format_type)."""
    allowed = _TYPES.get(kind(rule))
    return allowed is None or any(type_text == t or type_text.startswith(t + "(") for t in allowed)


def column_expr(column: str, rule: Rule, type_text: str) -> str | None:
    """SQL text of the obfuscated value of ``column`` (None for keep), typed ``type_text``:
    the same over the source (the copy) as over the stage (replay).  The hashed text is
    the value's as ``type_text``, timestamps with time zone in UTC."""
    if rule == "keep":
        return None
    col = sql.Identifier(column)
    typ = sql.SQL(type_text)
    if rule == "skip":
        out: sql.Composable = sql.SQL("null")
    elif isinstance(rule, dict):
        out = _json(sql.SQL("({}::{})::jsonb").format(col, typ), rule, 1)
    else:
        value = sql.SQL("({}::{})").format(col, typ)
        if type_text == "timestamp with time zone":
            value = sql.SQL("({} at time zone 'UTC')").format(value)
        out = _scalar(rule, sql.SQL("{}::text").format(value))
    return sql.SQL("({})::{}").format(out, typ).as_string(None)


def _hmac(text: sql.Composable) -> sql.Composable:
    return sql.SQL(
        "sha256(decode(current_setting({opad}), 'hex')"
        " || sha256(decode(current_setting({ipad}), 'hex') || convert_to({m}, 'UTF8')))"
    ).format(opad=sql.Literal(OPAD), ipad=sql.Literal(IPAD), m=text)


def _scalar(rule: str, text: sql.Composable) -> sql.Composable:
    """``rule`` applied to a value given as its text (NULL stays NULL)."""
    if rule == "hash":
        return sql.SQL("encode({}, 'hex')").format(_hmac(text))
    if rule in ("hash32", "hash64"):
        size = 4 if rule == "hash32" else 8
        return sql.SQL("('x' || encode(substring({} from 1 for {}), 'hex'))::bit({})::{}").format(
            _hmac(text),
            sql.Literal(size),
            sql.Literal(size * 8),
            sql.SQL("integer" if size == 4 else "bigint"),
        )
    # bool: whether the value is set to something (empty, 0 and false are false)
    return sql.SQL("{t} not in ('', '0', 'f', 'false')").format(t=text)


def _json(value: sql.Composable, rules: dict[str, Rule], depth: int) -> sql.Composable:
    """The object ``value`` (jsonb) with only its listed keys, each through its rule; NULL
    when it is not an object."""
    key, item = sql.Identifier(f"_k{depth}"), sql.Identifier(f"_v{depth}")
    kept = {k: r for k, r in rules.items() if r != "skip"}
    if not kept:
        return sql.SQL("case when jsonb_typeof({v}) = 'object' then '{{}}'::jsonb end").format(
            v=value
        )
    cases = []
    for name, rule in kept.items():
        if rule == "keep":
            out: sql.Composable = item
        elif isinstance(rule, dict):
            out = _json(item, rule, depth + 1)
        else:
            out = sql.SQL("to_jsonb({})").format(
                _scalar(rule, sql.SQL("({} #>> '{{}}')").format(item))
            )
        cases.append(sql.SQL("when {} then {}").format(sql.Literal(name), out))
    return sql.SQL(
        "case when jsonb_typeof({v}) = 'object' then coalesce((select jsonb_object_agg({k}, case"
        " {k} {cases} end) from jsonb_each({v}) as {e}({k}, {i}) where {k} = any({names})),"
        " '{{}}'::jsonb) end"
    ).format(
        v=value,
        k=key,
        i=item,
        e=sql.Identifier(f"_e{depth}"),
        cases=sql.SQL(" ").join(cases),
        names=sql.SQL("{}::text[]").format(sql.Literal(list(kept))),
    )
