"""The read of a table without any key (``Route.keyless``; docs/replication.md, "Tables
without a key").

Every column identifies a row, as PostgreSQL's ``REPLICA IDENTITY FULL``: the table is a
multiset of rows.  Its events are not collapsed per key: each INSERT adds one copy of its
row image, each DELETE removes one, an UPDATE removes its old image (``ev_extra2``) and
adds its new one.  :func:`table_query` sums those per image on the provider (images
compared as the subscriber's typed values) and returns each image with a net change as
that many ``I`` or ``D`` rows, which the bulk handler's apply turns into deletes of as many
equal rows and inserts (``pgferry.handlers.unkeyed``).  A batch of inserts only is read as
it is: no grouping, a plain insert.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from pgferry import expressions
from pgferry.apply.replay.batch_sql import Segment, table_events
from pgferry.registry.routes import Route, split_name


def table_query(
    batch_sql: str,
    route: Route,
    columns: Sequence[str],
    types: Sequence[str],
    segment: Segment,
    *,
    barrier: int | None = None,
    inserts_only: bool = False,
) -> str:
    """SQL text of a keyless table's rows ``(op, *columns)``: net ``I`` / ``D`` copies of
    each row image (see the module docstring)."""
    coldef = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t))
        for c, t in zip(columns, types, strict=True)
    )
    where = table_events(route, segment, "e.ev_type like '_:%'")
    if barrier is not None:
        where.append(sql.SQL("e.ev_id > {}").format(sql.Literal(barrier)))
    cols = sql.SQL(", ").join(sql.SQL("r.{}").format(sql.Identifier(c)) for c in columns)
    if inserts_only:
        query = sql.SQL(
            """
            select 'I'::"char", {cols}
              from ({batch}) e
              cross join lateral json_to_record(e.ev_data::json) as r({coldef})
             where {where}{cond}
            """
        ).format(
            cols=cols,
            batch=sql.SQL(batch_sql),
            coldef=coldef,
            where=sql.SQL(" and ").join(where),
            cond=_condition(route, sql.SQL("e.ev_data")),
        )
        return query.as_string(None)
    # Grouped by the text of the typed row (read in one session): values, not the writer's
    # spelling of them (a timestamptz's text depends on the writer's TimeZone).
    key = sql.SQL(", ").join(sql.SQL("k.{}").format(sql.Identifier(c)) for c in columns)
    query = sql.SQL(
        """
        select (case when g.n > 0 then 'I' else 'D' end)::"char", {cols}
          from (select min(v.img) as img, sum(v.n) as n
                  from ({batch}) e
                  cross join lateral (values
                        (e.ev_data, case when e.ev_type like 'D:%' then -1 else 1 end),
                        (case when e.ev_type like 'U:%' then e.ev_extra2 end, -1)) as v(img, n)
                  cross join lateral json_to_record(v.img::json) as k({coldef})
                 where {where} and v.img is not null
                 group by row({key})::text
                having sum(v.n) <> 0) as g
          cross join lateral generate_series(1, abs(g.n)) as copies(i)
          cross join lateral json_to_record(g.img::json) as r({coldef})
         where true{cond}
        """
    ).format(
        cols=cols,
        batch=sql.SQL(batch_sql),
        coldef=coldef,
        where=sql.SQL(" and ").join(where),
        key=key,
        cond=_condition(route, sql.SQL("g.img")),
    )
    return query.as_string(None)


def _condition(route: Route, image: sql.Composable) -> sql.Composable:
    """`` and <condition on the image>``: the copy condition and the handler's row filter;
    rows outside them are not on the subscriber, so their images are neither inserted nor
    deleted there."""
    condition = route.image_condition
    if not condition:
        return sql.SQL("")
    on_image = expressions.on_row_image(condition, split_name(route.table_name), image)
    return sql.SQL(" and coalesce({}, false)").format(on_image)
