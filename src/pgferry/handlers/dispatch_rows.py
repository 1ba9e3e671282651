"""The statements that write one batch's events of a ``dispatch`` table.

Replay hands :mod:`pgferry.handlers.dispatch` the table's events, uncollapsed (an events
stage); :class:`BatchRows` decodes each event's row image as the table's row type
(``json_populate_record``), gives it its period and, unless every version is kept, keeps
each key's last event.  Writing is one statement: a CTE of those rows, materialised once,
and one INSERT (or DELETE) per partition that it touches.
"""

from __future__ import annotations

from datetime import datetime

from psycopg import sql

from pgferry.handlers import partitions
from pgferry.handlers.api import HandlerError, Staged

# Columns the statements add beside the table's own (names a table is unlikely to have).
_EV, _OP, _PART = "_ferry_ev_id", "_ferry_op", "_ferry_part"


class BatchRows:
    """The statements over one batch's events of the table (``e``: the stage, ``r``: the
    event's row decoded as the table's row type)."""

    def __init__(
        self,
        staged: Staged,
        dest: partitions.Parent,
        barrier: int | None,
        part: sql.Composable,
        keep_all: bool,
        field: str | None = None,
    ) -> None:
        self.conn, self.stage, self.dest, self.part = staged.conn, staged.relation, dest, part
        self.field = field  # the date column the period comes from, if any
        self.key = [sql.Identifier(c) for c in staged.target.pk]
        ops = "IU" if keep_all else "IUD"
        where = [sql.SQL("e.ev_type ~ {}").format(sql.Literal(f"^[{ops}]:"))]
        if barrier is not None:
            where.append(sql.SQL("e.ev_id > {}").format(sql.Literal(barrier)))
        self.where = sql.SQL(" and ").join(where)
        self.keep_all = keep_all
        self.parent = sql.Identifier(staged.target.dest_schema, staged.target.dest_name)

    def _from(self) -> sql.Composable:
        return sql.SQL(
            "{stage} e cross join lateral json_populate_record(null::{parent}, e.ev_data::json) r"
        ).format(stage=self.stage, parent=self.parent)

    def columns(self) -> list[str] | None:
        """The table's columns the events carry (None: no row event to apply)."""
        row = self.conn.execute(
            sql.SQL(
                "select array(select json_object_keys(e.ev_data::json)) from {} e"
                " where {} order by e.ev_id limit 1"
            ).format(self.stage, self.where)
        ).fetchone()
        if row is None:
            return None
        carried = set(row[0])
        return [c for c in self.dest.columns if c in carried]

    def _rows(self) -> sql.Composable:
        """Each row event to apply with its op and period: every one (keep_all) or each
        key's last (plain, keep_latest)."""
        select = sql.SQL(
            "select e.ev_id as {ev}, substr(e.ev_type, 1, 1) as {op}, {part} as {pc}, r.*"
            " from {src} where {where}"
        ).format(
            ev=sql.Identifier(_EV), op=sql.Identifier(_OP), part=self.part,
            pc=sql.Identifier(_PART), src=self._from(), where=self.where,
        )  # fmt: skip
        if self.keep_all:
            return select
        key = sql.SQL(", ").join(self.key)
        return sql.SQL("select distinct on ({k}) * from ({s}) x order by {k}, {ev} desc").format(
            k=key, s=select, ev=sql.Identifier(_EV)
        )

    def periods(self) -> tuple[list[datetime], list[datetime]]:
        """The periods of the rows to write and of the rows to delete (a NULL date of a
        row to write is an error of the batch).

        Taken from every event, not each key's last one (a period whose rows are all
        replaced again in the batch then gets its partition too), reading only the date
        column of the images; the exact, slower way only when that finds a NULL date."""
        if self.field is None:
            src: sql.Composable = sql.SQL("{} e").format(self.stage)
        else:
            kind = sql.SQL(self.dest.columns[self.field])
            src = sql.SQL(
                "{} e cross join lateral (select (e.ev_data::json ->> {})::{} as {}) r"
            ).format(self.stage, sql.Literal(self.field), kind, sql.Identifier(self.field))
        query = sql.SQL("select distinct {}, e.ev_type ~ '^D:' from {} where {}").format(
            self.part, src, self.where
        )
        rows = self.conn.execute(query).fetchall()
        if any(r[0] is None and not r[1] for r in rows):
            exact = sql.SQL("select distinct {}, {} = 'D' from ({}) x").format(
                sql.Identifier(_PART), sql.Identifier(_OP), self._rows()
            )
            rows = self.conn.execute(exact).fetchall()
            if any(r[0] is None and not r[1] for r in rows):
                raise HandlerError(
                    f"dispatch: a row of {self.parent.as_string(self.conn)} has no time to"
                    " choose its partition by (NULL part_field)"
                )
        writes = sorted({r[0] for r in rows if not r[1]})
        return writes, sorted({r[0] for r in rows if r[1] and r[0] is not None})

    def delete_replaced(self, naming: partitions.Naming) -> int:
        """keep_latest: remove the versions of keys updated or deleted in the batch, in
        whichever partition they are (through the parent)."""
        keys = sql.SQL("select distinct {} from {} where {} and e.ev_type !~ '^I:'").format(
            sql.SQL(", ").join(sql.SQL("r.{}").format(c) for c in self.key),
            self._from(),
            self.where,
        )
        if len(self.key) == 1:
            # One array, probed in each partition's key index: a join would scan them all.
            query = sql.SQL("delete from {} t where t.{} = any(array({}))").format(
                naming.parent_ident, self.key[0], keys
            )
        else:
            match = sql.SQL(" and ").join(sql.SQL("t.{c} = d.{c}").format(c=c) for c in self.key)
            query = sql.SQL("delete from {} t using ({}) d where {}").format(
                naming.parent_ident, keys, match
            )
        return max(self.conn.execute(query).rowcount, 0)

    def write(
        self,
        naming: partitions.Naming,
        periods: tuple[list[datetime], list[datetime]],
        columns: list[str],
        row_mode: str,
    ) -> tuple[int, int]:
        """Insert (plain: upsert, or delete) each row in its partition, in one statement;
        returns (rows written, rows deleted)."""
        cols = sql.SQL(", ").join(map(sql.Identifier, columns))
        upsert = _on_conflict(self.dest.pk, columns) if row_mode == "plain" else sql.SQL("")
        ctes, writes, deletes = [], [], []
        starts, deleted = periods
        # keep_all: versions go in in event order (a serial key then follows it).
        order: sql.Composable = sql.SQL("")
        if self.keep_all:
            order = sql.SQL(" order by d.{}").format(sql.Identifier(_EV))
        for i, (table, here) in enumerate(self._targets(naming, starts)):
            ins = sql.Identifier(f"i{i}")
            ctes.append(
                sql.SQL(
                    "{ins} as (insert into {t} ({cols}) select {cols} from _ferry_rows d"
                    " where d.{op} <> 'D'{here}{order}{upsert} returning 1)"
                ).format(
                    ins=ins,
                    t=table,
                    cols=cols,
                    op=sql.Identifier(_OP),
                    here=here,
                    order=order,
                    upsert=upsert,
                )
            )
            writes.append(sql.SQL("(select count(*) from {})").format(ins))
        if row_mode == "plain":  # a delete goes to the partition of the deleted image
            match = sql.SQL(" and ").join(sql.SQL("t.{c} = d.{c}").format(c=c) for c in self.key)
            if not self.dest.declarative:  # partitions that never were hold nothing to delete
                absent = set(partitions.missing(self.conn, naming, deleted))
                deleted = [s for s in deleted if s not in absent]
            for j, (table, here) in enumerate(self._targets(naming, deleted)):
                dele = sql.Identifier(f"d{j}")
                ctes.append(
                    sql.SQL(
                        "{d} as (delete from {t} t using _ferry_rows d"
                        " where d.{op} = 'D'{here} and {m} returning 1)"
                    ).format(d=dele, t=table, op=sql.Identifier(_OP), here=here, m=match)
                )
                deletes.append(sql.SQL("(select count(*) from {})").format(dele))
        if not ctes:
            return 0, 0
        row = self.conn.execute(
            sql.SQL("with _ferry_rows as ({rows}), {ctes} select {w}, {d}").format(
                rows=self._rows(),
                ctes=sql.SQL(", ").join(ctes),
                w=sql.SQL(" + ").join(writes or [sql.SQL("0")]),
                d=sql.SQL(" + ").join(deletes or [sql.SQL("0")]),
            )
        ).fetchone()
        return int(row[0]), int(row[1])

    def _targets(
        self, naming: partitions.Naming, starts: list[datetime]
    ) -> list[tuple[sql.Composable, sql.Composable]]:
        """(table, condition on ``d``) per partition written: a declarative parent routes
        every row itself."""
        if self.dest.declarative:
            return [(naming.parent_ident, sql.SQL(""))] if starts else []
        part = sql.Identifier(_PART)
        return [
            (
                naming.ident(naming.name(s)),
                sql.SQL(" and d.{} = {}::timestamp").format(part, sql.Literal(s)),
            )
            for s in starts
        ]


def _on_conflict(pk: tuple[str, ...], columns: list[str]) -> sql.Composable:
    others = [c for c in columns if c not in pk]
    if not others:
        return sql.SQL(" on conflict ({}) do nothing").format(
            sql.SQL(", ").join(map(sql.Identifier, pk))
        )
    return sql.SQL(" on conflict ({}) do update set {}").format(
        sql.SQL(", ").join(map(sql.Identifier, pk)),
        sql.SQL(", ").join(sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c))
                           for c in others),
    )  # fmt: skip
