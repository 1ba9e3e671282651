"""``applyfn``: a SQL function of the operator's is called for each event of the table."""

from __future__ import annotations

from psycopg import sql

from pgferry.handlers.api import Applied, Handler, HandlerError, Param, Staged, TableCheck

# The function's arguments, in order (the original's list).
SIGNATURE = "text, bigint, bigint, timestamptz, bigint, integer, text, text, text, text, text, text"


class ApplyFn(Handler):
    """Call a SQL function for each event of the table, in ev_id order, instead of applying it.

    The function is called as func(func_conf, tick_id, ev_id, ev_time, ev_txid, ev_retry,
    ev_type, ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4) with the argument types
    text, bigint, bigint, timestamptz, bigint, integer, text, text, text, text, text, text,
    in the transaction that applies the batch (TRUNCATEs included, as ev_type 'R'); what it
    returns is ignored.  No local table is needed and nothing is copied.
    """

    name = "applyfn"
    mode = "events"
    needs_table = False
    params = (
        Param(
            "func_name",
            "the function, [schema.]name as SQL writes it (without a schema: public)",
            required=True,
        ),
        Param("func_conf", "text passed as the function's first argument", default=""),
    )

    def _func(self) -> sql.Composable:
        # The session's search_path holds no user schema: a bare name is public's, as for
        # table names.
        parts = _name_parts(self.args["func_name"])
        if len(parts) == 1:
            parts = ["public", *parts]
        return sql.SQL(".").join(map(sql.Identifier, parts))

    def validate(self) -> None:
        _name_parts(self.args["func_name"])

    def check(self, table: TableCheck) -> None:
        func = self._func().as_string(None)
        found = table.conn.execute(
            "select to_regprocedure(%s) is not null", (f"{func}({SIGNATURE})",)
        ).fetchone()
        if not (found and found[0]):
            shown = self.args["func_name"]
            raise HandlerError(f"handler applyfn: no function {shown}({SIGNATURE}) here")

    def apply(self, staged: Staged) -> Applied:
        # The calls run in the order of the sorted sub-query, as its rows reach the outer
        # target list; the results (one per event) are read and dropped.
        cur = staged.conn.execute(
            sql.SQL(
                "select {func}({conf}, {tick}, ev_id, ev_time, ev_txid, ev_retry, ev_type,"
                " ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4)::text"
                " from (select * from {stage} order by ev_id offset 0) as e"
            ).format(
                func=self._func(),
                conf=sql.Literal(self.args["func_conf"]),
                tick=sql.Literal(staged.tick_id),
                stage=staged.relation,
            )
        )
        return Applied(upserts=cur.rowcount)


def _name_parts(text: str) -> list[str]:
    """``schema.name`` / ``name`` / ``"Quoted".name`` as identifiers (unquoted folded)."""
    parts: list[str] = []
    for raw in _split_dots(text.strip()):
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            parts.append(raw[1:-1].replace('""', '"'))
        elif raw and raw.replace("_", "a").replace("$", "a").isalnum() and not raw[0].isdigit():
            parts.append(raw.lower())
        else:
            raise ValueError(f"func_name {text!r} is not a function name")
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"func_name {text!r} is not a function name")
    return parts


def _split_dots(text: str) -> list[str]:
    out, buf, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "." and not quoted:
            out.append(buf)
            buf = ""
        else:
            buf += ch
    out.append(buf)
    return out
