"""``dispatch``: the table's rows go into time partitions, created when first needed.

The partition of a row is chosen by the batch's time, the event's time, the current time
or a date column of the row (``part_mode``), cut into hours, days, months or years
(``period``).  The handler takes the table's events uncollapsed (``mode = "events"``), so
that it can keep every version of a row (``row_mode=keep_all``) as well as the latest
(``keep_latest``) or apply each key's last change to its own partition (``plain``).  The
partitions' names, creation and retention live in :mod:`pgferry.handlers.partitions`;
this module decides what goes where, with a few set-based statements per batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgferry.db import error_text
from pgferry.handlers import dispatch_rows, partitions
from pgferry.handlers.api import Applied, Handler, HandlerError, Param, Staged, TableCheck

log = logging.getLogger(__name__)

PART_MODES = ("batch_time", "event_time", "date_field", "current_time")
ROW_MODES = ("plain", "keep_latest", "keep_all")
DATE_TYPES = ("date", "timestamp without time zone", "timestamp with time zone")
# Retention looks at the partitions at most this often per table and worker process: a
# period is an hour at least, and listing a parent's partitions costs a catalog query.
RETENTION_EVERY = 600.0


@dataclass
class RetentionRuns:
    """When a worker's dispatch handlers last dropped old partitions (its
    :class:`~pgferry.handlers.api.HandlerContext` keeps one)."""

    last: dict[tuple[str, str], float] = field(default_factory=dict)  # (database, table)


class Dispatch(Handler):
    """Write rows into time partitions of the table, created on demand.

    Each row event goes to the partition of its period: by the batch's time (batch_time),
    the event's time (event_time), the time it is applied (current_time) or a date column
    of the row (date_field, with part_field=COLUMN); period is hour, day, month or year.
    Partitions are named by part_name (default %(parent)s_%(year)s_%(month)s_%(day)s for
    days, down to the period) and created when first needed: as plain tables inheriting
    the table (like it, including all), or, when the table is declaratively partitioned
    by range on part_field, as its partitions (rows are inserted into the table itself).

    row_mode: plain applies each key's last change of the batch to its partition (upsert
    or delete there); keep_latest keeps one row per key, in the partition of its latest
    version (an update deletes the old version wherever it is, then inserts); keep_all
    inserts every inserted or updated version and ignores deletes (the table's primary key
    needs a column the source lacks, e.g. a bigserial).  retention_period drops the
    partitions of this naming whose period ended longer ago than that.  There is no
    initial copy: add the table with --expect-sync.
    """

    name = "dispatch"
    mode = "events"
    params = (
        Param("part_mode", "what chooses the partition", default="batch_time",
              choices=PART_MODES),
        Param("part_field", "the date column of date_field"),
        Param("period", "time span of one partition", default="day", choices=partitions.PERIODS),
        Param("part_name", "partition name template (default: by period)"),
        Param("row_mode", "how changes are kept", default="plain", choices=ROW_MODES),
        Param("retention_period", "drop partitions older than this interval (e.g. 3 months)"),
        Param("ignore_truncate", "a TRUNCATE of the source empties nothing", kind=bool,
              default=False),
    )  # fmt: skip

    def __init__(self, args: Mapping) -> None:
        super().__init__(args)
        self._dest: partitions.Parent | None = None

    # --- checks -------------------------------------------------------------------------
    @property
    def template(self) -> str:
        return self.args["part_name"] or partitions.default_template(self.args["period"])

    @property
    def field(self) -> str | None:
        return self.args["part_field"] if self.args["part_mode"] == "date_field" else None

    def validate(self) -> None:
        mode, part_field = self.args["part_mode"], self.args["part_field"]
        if mode == "date_field" and not part_field:
            raise ValueError("part_mode=date_field needs part_field")
        if mode != "date_field" and part_field:
            raise ValueError(f"part_field is for part_mode=date_field, not {mode}")
        partitions.check_template(self.template, self.args["period"])

    def check(self, table: TableCheck) -> None:
        if table.node_type != "leaf":
            raise HandlerError(
                "handler dispatch is for leaf nodes (a branch's table is the copy source of "
                "the nodes below)"
            )
        if not table.expect_sync:
            raise HandlerError(
                "handler dispatch makes no initial copy: add the table with --expect-sync "
                "(its partitions get the changes from now on)"
            )
        assert table.dest is not None
        dest = partitions.read_parent(table.conn, table.dest)
        schema, parent = partitions.split(table.conn, table.dest)
        naming = partitions.Naming(schema, parent, self.template, self.args["period"])
        try:
            naming.check_length()
        except ValueError as exc:
            raise HandlerError(f"handler dispatch: {exc}") from None
        field, what = self.field, f"handler dispatch: {table.dest}"
        if field is not None:
            if field not in dest.columns:
                raise HandlerError(f"{what} has no column {field} (part_field)")
            if dest.columns[field] not in DATE_TYPES:
                raise HandlerError(
                    f"{what}: part_field {field} is {dest.columns[field]}, not a date or timestamp"
                )
        if dest.declarative:
            key = partitions.range_key(table.conn, table.dest)
            if field is None or key != field:
                raise HandlerError(
                    f"{what} is partitioned: it must be by range on part_field (part_mode="
                    f"date_field, part_field={key or 'its one range column'})"
                )
        row_mode = self.args["row_mode"]
        if row_mode != "keep_all" and not table.pk:
            raise HandlerError(f"{what}: row_mode={row_mode} needs a key on the source")
        if row_mode == "plain" and not dest.pk:
            raise HandlerError(f"{what}: row_mode=plain needs a primary key (an upsert)")
        source_cols = set(table.columns or ())
        if row_mode == "keep_all" and dest.pk and set(dest.pk) <= source_cols:
            raise HandlerError(
                f"{what}: row_mode=keep_all keeps every version of a row, so its primary"
                " key needs a column the source lacks (filled by a default, e.g. a bigserial)"
            )
        retention = self.args["retention_period"]
        if retention:
            try:
                with table.conn.transaction():
                    row = table.conn.execute(
                        "select %s::interval > interval '0'", (retention,)
                    ).fetchone()
            except psycopg.Error as exc:
                raise HandlerError(
                    f"handler dispatch: retention_period {retention!r}: {error_text(exc)}"
                ) from None
            if not (row and row[0]):
                raise HandlerError(f"handler dispatch: retention_period {retention!r} is not > 0")
        return None

    @property
    def copies(self) -> bool:
        return False  # rows from before add-table have no batch or event time: see docs

    # --- replay -------------------------------------------------------------------------
    def apply(self, staged: Staged) -> Applied:
        conn, target = staged.conn, staged.target
        if self._dest is None:
            self._dest = partitions.read_parent(conn, target.dest_fq)
        dest = self._dest
        naming = partitions.Naming(
            target.dest_schema, target.dest_name, self.template, self.args["period"]
        )
        done = Applied()
        barrier = None
        if not self.args["ignore_truncate"]:
            barrier = _scalar(conn, sql.SQL("select max(ev_id) from {} where ev_type = 'R'"),
                              staged.relation)  # fmt: skip
            if barrier is not None:
                conn.execute(sql.SQL("truncate {}").format(naming.parent_ident))
        keep_all = self.args["row_mode"] == "keep_all"
        events = dispatch_rows.BatchRows(
            staged, dest, barrier, self._part_expr(staged, dest), keep_all, self.field
        )
        columns = events.columns()
        if columns is not None:
            periods = events.periods()
            for start in partitions.missing(conn, naming, periods[0]):
                partitions.create(
                    conn,
                    naming,
                    start,
                    declarative=dest.declarative,
                    field=self.field,
                    field_type=dest.columns.get(self.field or ""),
                )
            if self.args["row_mode"] == "keep_latest":
                done.deletes = events.delete_replaced(naming)
            ins, dels = events.write(naming, periods, columns, self.args["row_mode"])
            done.upserts, done.deletes = ins, done.deletes + dels
        self._retention(conn, naming)
        return done

    def _part_expr(self, staged: Staged, dest: partitions.Parent) -> sql.Composable:
        """The start of each event's period (a UTC timestamp) over ``e`` and ``r``."""
        mode, period = self.args["part_mode"], sql.Literal(self.args["period"])
        if mode == "batch_time" and staged.tick_time is not None:
            moment: sql.Composable = sql.SQL("{}::timestamptz").format(
                sql.Literal(staged.tick_time)
            )
        elif mode == "event_time":
            moment = sql.SQL("e.ev_time")
        elif mode == "date_field":
            field = sql.SQL("r.{}").format(sql.Identifier(self.args["part_field"]))
            kind = dest.columns[self.args["part_field"]]
            if kind == "timestamp with time zone":
                return sql.SQL("date_trunc({}, {} at time zone 'UTC')").format(period, field)
            return sql.SQL("date_trunc({}, {}::timestamp)").format(period, field)
        else:  # current_time, or a batch without a time
            moment = sql.SQL("now()")
        return sql.SQL("date_trunc({}, {} at time zone 'UTC')").format(period, moment)

    def _retention(self, conn: psycopg.Connection, naming: partitions.Naming) -> None:
        retention = self.args["retention_period"]
        if not retention:
            return
        key = (conn.info.dsn, naming.parent_ident.as_string(conn))
        now = time.monotonic()
        runs = self.context.state(RetentionRuns).last
        last = runs.get(key)
        if last is not None and now - last < RETENTION_EVERY:
            return
        partitions.drop_older(conn, naming, retention)
        runs[key] = now


def _scalar(conn: psycopg.Connection, query: sql.SQL, *args: sql.Composable) -> object:
    row = conn.execute(query.format(*args)).fetchone()
    return row[0] if row else None
