"""``obfuscate``: a leaf's copy of a table whose sensitive columns are hashed or dropped.

The rules come from a YAML file (:mod:`pgferry.handlers.obfuscate_rules`) read at
``add-table`` and stored with the table, checked against both tables there; the HMAC key
is the node's ``obfuscator_key`` ini setting, never stored nor printed (only a fingerprint
is stored, to notice a key that changed).  The copy computes each column's obfuscated
value in its SELECT on the source, so the original values of those columns never reach
this node; replay computes the same in the temporary stage table (not WAL-logged) before
the rows are applied as ``bulk`` applies them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from pgferry import settings
from pgferry.db import error_text
from pgferry.handlers import obfuscate_rules as rules
from pgferry.handlers import upsert
from pgferry.handlers.api import Applied, Handler, HandlerError, Param, Staged, TableCheck

log = logging.getLogger(__name__)

KEY_SETTING, MAP_SETTING = settings.OBFUSCATOR_KEY.key, settings.OBFUSCATOR_MAP.key


class Obfuscate(Handler):
    """Keep the table with its sensitive columns hashed or left out, by a YAML rule file.

    Every column of the table needs a rule in the file (map=FILE, or the ini setting
    obfuscator_map): keep, skip (NULL), hash (HMAC-SHA256 as hex text), hash32 / hash64
    (the HMAC's first 4 / 8 bytes as an integer), bool (whether the value is set: NULL
    stays NULL, '', 0 and false are false), or a mapping for a json/jsonb column: the
    rules of its keys (other keys are dropped).  The HMAC key is the ini setting
    obfuscator_key.  The copy obfuscates on the source, replay before applying; equal
    values give equal hashes on every node with the same key.  Leaf nodes only.
    """

    name = "obfuscate"
    params = (
        Param("map", "YAML rule file (default: the ini setting obfuscator_map)"),
        Param("rules", "the table's rules as read at add-table (JSON)", computed=True),
        Param("key_id", "fingerprint of the key the table was added with", computed=True),
    )

    def __init__(self, args: Mapping[str, Any]) -> None:
        super().__init__(args)
        self._warned = False

    @property
    def rules(self) -> dict[str, tuple[rules.Rule, str]]:
        """Column -> (rule, its type here), as stored at add-table."""
        stored = json.loads(self.args["rules"] or "{}")
        return {c: (r["rule"], r["type"]) for c, r in stored.items()}

    def validate(self) -> None:
        if self.args["rules"] is not None:
            try:
                self.rules  # noqa: B018 - parses
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"stored rules are damaged: {exc}") from None

    # --- add-table ----------------------------------------------------------------------
    def _key(self) -> str:
        key = self.config.get(settings.OBFUSCATOR_KEY) if self.config is not None else None
        if not key:
            raise HandlerError(f"handler obfuscate needs the ini setting {KEY_SETTING}")
        return key

    def check(self, table: TableCheck) -> dict[str, str]:
        if table.node_type != "leaf":
            raise HandlerError(
                "handler obfuscate is for leaf nodes (a branch would pass the original"
                " values on to the nodes below)"
            )
        ini_map = self.config.get(settings.OBFUSCATOR_MAP) if self.config else None
        path = self.args["map"] or ini_map
        if not path:
            raise HandlerError(
                f"handler obfuscate needs a rule file: --handler-arg map=FILE or {MAP_SETTING}"
            )
        key = self._key()
        assert table.dest is not None
        schema, name = _names(table.conn, table.table_name)
        found = rules.table_rules(rules.load(path), schema, name, path)
        dest = _columns(table.conn, table.dest)
        source = set(table.columns or ())
        pk = set(table.pk) | set(_primary_key(table.conn, table.dest))
        what = f"handler obfuscate: {table.dest}"
        for col, rule in found.items():
            if col not in dest:
                raise HandlerError(f"{what} has no column {col} (in {path})")
            kind = rules.kind(rule)
            if kind not in ("keep", "skip") and col not in source:
                raise HandlerError(f"{what}: column {col} is not in the source table")
            if not rules.fits(rule, dest[col][0]):
                raise HandlerError(
                    f"{what}: rule {kind} cannot write column {col} ({dest[col][0]})"
                )
            if col in pk and kind not in rules.KEY_RULES:
                raise HandlerError(
                    f"{what}: key column {col} may only be {', '.join(rules.KEY_RULES)} (not"
                    f" {kind}: rows would share a key)"
                )
            if kind == "skip" and dest[col][1]:
                raise HandlerError(f"{what}: column {col} is NOT NULL: it cannot be skip")
        missing = [c for c in dest if c not in found]
        if missing:
            raise HandlerError(f"{what}: no rule for column {missing[0]} in {path}")
        stored = {c: {"rule": r, "type": dest[c][0]} for c, r in found.items()}
        # Both statements are planned (not run) where they will run: types and names hold.
        exprs = _exprs({c: (r, dest[c][0]) for c, r in found.items()})
        _explain(table.provider or table.conn, table.table_name, exprs, "on the source")
        _explain(table.conn, table.dest, exprs, "here")
        return {"rules": json.dumps(stored, sort_keys=True), "key_id": rules.key_id(key)}

    # --- the copy -----------------------------------------------------------------------
    def copy_column_exprs(self) -> dict[str, str]:
        return _exprs(self.rules)

    def copy_columns(self) -> Sequence[str] | None:
        return list(self.rules)  # a column without a rule is never written

    def copy_settings(self) -> dict[str, str]:
        ipad, opad = rules.pads(self._checked_key())
        return {rules.IPAD: ipad, rules.OPAD: opad}

    def _checked_key(self) -> str:
        key = self._key()
        if self.args["key_id"] and rules.key_id(key) != self.args["key_id"]:
            raise HandlerError(
                f"handler obfuscate: {KEY_SETTING} is not the key the table was added with"
                " (its hashes would not match): restore it, or change-handler and resync"
            )
        return key

    # --- replay -------------------------------------------------------------------------
    def apply(self, staged: Staged) -> Applied:
        table = self.rules
        sets = []
        for col in staged.target.columns:
            if col in table:
                expr = rules.column_expr(col, *table[col])
                if expr is not None:
                    sets.append(sql.SQL("{} = {}").format(sql.Identifier(col), sql.SQL(expr)))
            else:  # a column added after add-table: never written until it has a rule
                sets.append(sql.SQL("{} = null").format(sql.Identifier(col)))
                if not self._warned:
                    log.warning(
                        "Table %s: column %s has no obfuscation rule: written as NULL"
                        " (add a rule and run change-handler)",
                        staged.target.dest_text,
                        col,
                    )
                    self._warned = True
        if sets:
            conn, settings = staged.conn, self.copy_settings()
            names = list(settings)
            conn.execute(
                "select set_config(n, v, true) from unnest(%s::text[], %s::text[]) as s(n, v)",
                (names, [settings[n] for n in names]),
            )
            try:
                conn.execute(
                    sql.SQL("update {} set {}").format(staged.relation, sql.SQL(", ").join(sets))
                )
            finally:  # the padded keys do not outlive the statement that needs them
                conn.execute(
                    "select set_config(n, '', true) from unnest(%s::text[]) as s(n)", (names,)
                )
        return upsert.apply_rows(staged)


def _exprs(table: Mapping[str, tuple[rules.Rule, str]]) -> dict[str, str]:
    """Column -> its obfuscated value (SQL text), for every column not kept as it is."""
    out = {}
    for col, (rule, type_text) in table.items():
        expr = rules.column_expr(col, rule, type_text)
        if expr is not None:
            out[col] = expr
    return out


def _names(conn: psycopg.Connection, fq: str) -> tuple[str, str]:
    """(schema, name) of a ``%I.%I`` table name, as the server parses it."""
    row = conn.execute("select (parse_ident(%s))[1], (parse_ident(%s))[2]", (fq, fq)).fetchone()
    assert row is not None
    return row[0], row[1]


def _columns(conn: psycopg.Connection, fq: str) -> dict[str, tuple[str, bool]]:
    """Insertable column -> (type, NOT NULL without a default) of a local table."""
    rows = conn.execute(
        """
        select attname, format_type(atttypid, atttypmod), attnotnull and not atthasdef
          from pg_attribute
         where attrelid = %s::regclass and attnum > 0 and not attisdropped
           and attgenerated = ''
         order by attnum
        """,
        (fq,),
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def _primary_key(conn: psycopg.Connection, fq: str) -> list[str]:
    rows = conn.execute(
        """
        select a.attname from pg_index i
          join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any(i.indkey)
         where i.indrelid = %s::regclass and i.indisprimary
        """,
        (fq,),
    ).fetchall()
    return [r[0] for r in rows]


def _explain(conn: psycopg.Connection, fq: str, exprs: Mapping[str, str], where: str) -> None:
    if not exprs:
        return
    query = sql.SQL("explain select {} from only {}").format(
        sql.SQL(", ").join(sql.SQL(e) for e in exprs.values()),
        sql.Identifier(*_names(conn, fq)),
    )
    try:
        with conn.transaction():
            conn.execute(query)
    except psycopg.Error as exc:
        raise HandlerError(
            f"handler obfuscate: the rules do not fit {fq} {where}: {error_text(exc)}"
        ) from None
