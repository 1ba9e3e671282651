"""``shard`` (also ``part``): each subscriber keeps one hash shard of a table.

The shard of a row is computed from its key column(s) on the provider, from the row as it
is (the copy) or from the event's row image (replay, forwarding), with the same SQL
expression: ``(hash_func(key::text) & shard_mask) = shard_nr``.  Nothing is added to the
root's capture.
"""

from __future__ import annotations

import re

from psycopg import sql

from pgferry.handlers.api import Handler, HandlerError, Param, TableCheck

# A function name as SQL writes it unquoted: [schema.]name.
_FUNC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?")


class Shard(Handler):
    """Keep one hash shard of the table: rows whose key hashes to this node's shard number.

    A row belongs to shard N when (hash_func(key::text) & shard_mask) = N, where key is
    the value of the key column (several columns: their row value).  The copy takes only
    this shard's rows, replay applies only this shard's events, and a branch forwards only
    them; all computed on the provider from the row, so the root's capture needs nothing
    extra.  When the key columns are all primary-key columns, other shards' events are
    skipped; otherwise a row whose key moves to another shard is deleted here.  Shards
    number 0 to shard_mask (shard_mask = shard count - 1 for a power-of-two count).
    """

    name = "shard"
    params = (
        Param(
            "key",
            "column (or comma-separated columns) whose hash chooses the shard",
            required=True,
            aliases=("hash_key",),
        ),
        Param("shard_nr", "this node's shard number", kind=int, required=True),
        Param("shard_mask", "mask applied to the hash (shard count - 1)", kind=int, required=True),
        Param("hash_func", "function (text) -> integer that hashes the key", default="hashtext"),
        Param("disable_replay", "copy only: events are not applied", kind=bool, default=False),
        Param(
            "ignore_truncate",
            "a TRUNCATE of the source does not empty the table",
            kind=bool,
            default=False,
        ),
    )
    forward_filtered = True

    def validate(self) -> None:
        nr, mask = self.args["shard_nr"], self.args["shard_mask"]
        if mask < 0:
            raise ValueError("shard_mask must not be negative")
        if nr < 0 or nr & mask != nr:
            raise ValueError(f"shard_nr {nr} is not a shard of shard_mask {mask}")
        if not _FUNC_NAME.fullmatch(self.args["hash_func"]):
            raise ValueError(f"hash_func {self.args['hash_func']!r} is not a function name")
        if not self.keys:
            raise ValueError("key names no column")

    @property
    def keys(self) -> list[str]:
        return [k.strip() for k in self.args["key"].split(",") if k.strip()]

    def _func(self) -> sql.Identifier:
        # An unquoted name in SQL folds to lower case: so does this one.
        return sql.Identifier(*self.args["hash_func"].lower().split("."))

    def check(self, table: TableCheck) -> None:
        missing = [k for k in self.keys if table.columns is not None and k not in table.columns]
        if missing:
            raise HandlerError(
                f"handler shard: {table.table_name} has no column {', '.join(missing)}"
            )
        source = table.provider or table.conn
        func = self._func().as_string(None)
        found = source.execute(
            "select p.prorettype in ('integer'::regtype, 'bigint'::regtype)"
            " from pg_proc p where p.oid = to_regprocedure(%s)",
            (f"{func}(text)",),
        ).fetchone()
        shown = self.args["hash_func"]
        if found is None:
            raise HandlerError(f"handler shard: no function {shown}(text) where rows are read")
        if not found[0]:
            raise HandlerError(f"handler shard: {shown}(text) must return integer or bigint")

    def row_filter(self) -> str:
        cols = [sql.Identifier(k).as_string(None) for k in self.keys]
        key = cols[0] if len(cols) == 1 else f"row({', '.join(cols)})"
        func = self._func().as_string(None)
        mask, nr = self.args["shard_mask"], self.args["shard_nr"]
        return f"({func}(({key})::text) & {mask}) = {nr}"

    @property
    def replays(self) -> bool:
        return not self.args["disable_replay"]

    @property
    def truncates(self) -> bool:
        return not self.args["ignore_truncate"]
