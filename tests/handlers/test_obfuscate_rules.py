"""The obfuscate handler's masking rules without a database: the padded keys the server's
HMAC is computed from, which spellings of a table a rule file may use, which column types
each rule may write, and the one-line refusals of a bad rule file.

The SQL the rules become runs on PostgreSQL in tests/handlers/test_obfuscate.py; here the
HMAC of ``pads`` is checked with Python's own.
"""

from __future__ import annotations

import hashlib
import hmac

import pytest

from pgferry.handlers import obfuscate_rules as rules
from pgferry.handlers.api import HandlerError

pytestmark = pytest.mark.pure


def _server_hmac(key: str, message: bytes) -> str:
    """What the SQL of ``_hmac`` computes from the two settings: sha256(opad || sha256(ipad
    || m))."""
    ipad, opad = (bytes.fromhex(p) for p in rules.pads(key))
    return hashlib.sha256(opad + hashlib.sha256(ipad + message).digest()).hexdigest()


@pytest.mark.parametrize(
    "key", ["k", "a" * 63, "b" * 64, "c" * 65, "ключ-🔑", "x" * 200, "tab\tand space"]
)
def test_padded_keys_give_the_standard_hmac(key: str) -> None:
    for message in (b"", b"alice@example.com", "naïve".encode()):
        assert _server_hmac(key, message) == hmac.new(key.encode(), message, "sha256").hexdigest()


def test_key_id_tells_keys_apart_and_not_the_key() -> None:
    assert rules.key_id("one") == rules.key_id("one")
    assert rules.key_id("one") != rules.key_id("two")
    assert len(rules.key_id("one")) == 16 and "one" not in rules.key_id("one")


@pytest.mark.parametrize(
    ("spelling", "schema", "name"),
    [
        ("public.users", "public", "users"),
        ("users", "public", "users"),
        ('"Mixed Case"."Tab le"', "Mixed Case", "Tab le"),
        ("Mixed Case.Tab le", "Mixed Case", "Tab le"),
        ('"sch""ema".t', None, None),  # a quoted name needs both parts quoted
        ("other.users", None, None),
    ],
)
def test_table_spellings(spelling: str, schema: str | None, name: str | None) -> None:
    doc = {spelling: {"id": "keep", "email": "hash"}}
    if schema is None:
        with pytest.raises(HandlerError, match="has no rules for public.users"):
            rules.table_rules(doc, "public", "users", "r.yaml")
        return
    assert rules.table_rules(doc, schema, name, "r.yaml") == {"id": "keep", "email": "hash"}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"t": {"c": "scramble"}}, "obfuscate: r.yaml: t.c: unknown rule 'scramble'"),
        ({"t": {"c": {}}}, "obfuscate: r.yaml: t.c: a JSON rule needs the rules of its keys"),
        ({"t": {"c": {"a": {"b": 3}}}}, "obfuscate: r.yaml: t.c.a.b: unknown rule 3"),
        ({"t": []}, "obfuscate: r.yaml: t must map its columns to rules"),
        ({"t": {"c": "keep"}, "public.t": {"c": "keep"}}, "names public.t twice"),
    ],
)
def test_bad_rules_are_named(doc: dict, message: str) -> None:
    with pytest.raises(HandlerError) as err:
        rules.table_rules(doc, "public", "t", "r.yaml")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("rule", "fitting", "refused"),
    [
        ("hash", ["text", "character varying(20)", "character(3)"], ["integer", "textual"]),
        ("hash32", ["integer", "bigint", "numeric(10,0)"], ["text", "smallint"]),
        ("hash64", ["bigint", "numeric"], ["integer"]),
        ("bool", ["boolean", "text"], ["integer"]),
        ({"a": "hash"}, ["json", "jsonb"], ["text"]),
        ("keep", ["anything", "integer"], []),
        ("skip", ["anything"], []),
    ],
)
def test_rule_fits_column_types(rule: rules.Rule, fitting: list[str], refused: list[str]) -> None:
    assert all(rules.fits(rule, t) for t in fitting)
    assert not any(rules.fits(rule, t) for t in refused)


def test_expressions_quote_the_column_and_keep_is_none() -> None:
    assert rules.column_expr("Email Addr", "keep", "text") is None
    assert rules.column_expr("x", "skip", "text") == "(null)::text"
    hashed = rules.column_expr('we"ird', "hash", "text")
    assert hashed is not None and '"we""ird"' in hashed
    assert rules.IPAD in hashed and rules.OPAD in hashed  # the key only by setting name
    utc = rules.column_expr("at", "hash", "timestamp with time zone")
    assert utc is not None and "at time zone 'UTC'" in utc
