"""Third-party handlers as an operator would write them, loaded through handler_modules."""

from __future__ import annotations

from psycopg import sql

from pgferry.handlers import Applied, Handler, HandlerError, Param, Staged, TableCheck


class UpperColumn(Handler):
    """Store one text column in upper case (copy and replay), otherwise as bulk does."""

    name = "upper_col"
    params = (Param("column", "the text column to store in upper case", required=True),)

    def check(self, table: TableCheck) -> None:
        if table.columns is not None and self.args["column"] not in table.columns:
            raise HandlerError(f"upper_col: {table.table_name} has no column {self.args['column']}")

    def column_exprs(self) -> dict[str, str]:
        col = sql.Identifier(self.args["column"]).as_string(None)
        return {self.args["column"]: f"upper({col})"}


class EventLog(Handler):
    """Append every event of the table to a log table instead of applying it."""

    name = "event_log"
    mode = "events"
    needs_table = False
    params = (
        Param("log_table", "table (tick_id, ev_id, ev_type, ev_data) to append to", required=True),
        Param("every", "keep only events whose ev_id is a multiple of this", kind=int, default=1),
    )

    def validate(self) -> None:
        if self.args["every"] < 1:
            raise ValueError("every must be at least 1")

    def apply(self, staged: Staged) -> Applied:
        cur = staged.conn.execute(
            sql.SQL(
                "insert into {} (tick_id, ev_id, ev_type, ev_data)"
                " select {}, ev_id, ev_type, ev_data from {} where ev_id % {} = 0 order by ev_id"
            ).format(
                sql.Identifier(*self.args["log_table"].split(".")),
                sql.Literal(staged.tick_id),
                staged.relation,
                sql.Literal(self.args["every"]),
            )
        )
        return Applied(upserts=cur.rowcount)


pgferry_handlers = [UpperColumn, EventLog]
