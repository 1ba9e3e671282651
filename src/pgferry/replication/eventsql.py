"""The query that reads one part of a batch on the provider, already decided.

Routing, the copy hand-over filter and the copy_condition are all evaluated by the
provider while it reads, so what comes back is small: per (table, key) only the last
event (``DISTINCT ON``), as rows of ``ferry.replay_stage`` (``COPY`` passes them through
untouched) whose ``(ev_id, table_name, op, row_key, row_data)`` carry
op ``U`` (upsert the image), ``D`` (delete by key), ``R`` (truncate) or ``S`` (sequence).
A row image that fails its table's condition becomes ``D``: a row that left the condition
disappears on the subscriber.
"""

from __future__ import annotations

from collections.abc import Iterable

from psycopg import sql

from pgferry.replication.routes import Route, split_name


def _key_expr(route: Route) -> sql.Composable:
    # Key as JSON text of the pk values: same image -> same text, whatever the types.
    parts = sql.SQL(", ").join(sql.SQL("j.d -> {}").format(sql.Literal(c)) for c in route.pk)
    return sql.SQL("json_build_array({})::text").format(parts)


def _cond_expr(route: Route) -> sql.Composable:
    # Evaluated against the source row type on the provider: the condition is written in
    # terms of the source table's columns.
    if not route.copy_condition:
        return sql.SQL("'U'")
    schema, name = split_name(route.table_name)
    return sql.SQL(
        "(select case when ({cond}) then 'U' else 'D' end"
        " from json_populate_record(null::{src}, j.d) as _r)"
    ).format(cond=sql.SQL(route.copy_condition), src=sql.Identifier(schema, name))


def part_query(
    batch_sql: str,
    routes: Iterable[Route],
    sequences: Iterable[str],
    *,
    consumer: str,
    batch_id: int,
    part: int,
    parts: int,
    after: int | None = None,
    upto: int | None = None,
) -> str:
    """SQL text producing the ``ferry.replay_stage`` rows of one part of the batch.

    Parts split the batch by a hash of (table, key), so every event of one key lands in
    the same part: each part collapses completely on its own and Spark needs no shuffle.
    """
    routes = [r for r in routes if r.applies]
    seqs = list(sequences)
    keys = [
        sql.SQL("when {} then {}").format(sql.Literal(r.table_name), _key_expr(r)) for r in routes
    ]
    conds = [
        sql.SQL("when {} then {}").format(sql.Literal(r.table_name), _cond_expr(r))
        for r in routes
        if r.copy_condition
    ]
    # Events already contained in a table's initial copy are skipped (design-notes §4).
    skips = [
        sql.SQL("(e.ev_extra1 = {} and pg_visible_in_snapshot(e.ev_txid::text::xid8, {}))").format(
            sql.Literal(r.table_name), sql.Literal(r.copy_snapshot)
        )
        for r in routes
        if r.merge_state == "catching-up" and r.copy_snapshot
    ]
    where = [
        sql.SQL(
            "((e.ev_type in ('R') or e.ev_type like '_:%') and e.ev_extra1 = any({tables}))"
            " or (e.ev_type = 'SEQ' and e.ev_extra1 = any({seqs}))"
        ).format(tables=sql.Literal([r.table_name for r in routes]), seqs=sql.Literal(seqs))
    ]
    if skips:
        where.append(sql.SQL("not ({})").format(sql.SQL(" or ").join(skips)))
    # Segments between queued scripts (EXECUTE events are barriers): after < ev_id <= upto.
    if after is not None:
        where.append(sql.SQL("e.ev_id > {}").format(sql.Literal(after)))
    if upto is not None:
        where.append(sql.SQL("e.ev_id <= {}").format(sql.Literal(upto)))
    in_part = (
        sql.SQL("true")
        if parts <= 1
        else sql.SQL(
            "mod(hashtext(x.table_name || coalesce(x.row_key, '')) & 2147483647, {}) = {}"
        ).format(sql.Literal(parts), sql.Literal(part))
    )
    upsert = (
        sql.SQL("case e.ev_extra1 {} else 'U' end").format(sql.SQL(" ").join(conds))
        if conds
        else sql.SQL("'U'")
    )
    key = (
        sql.SQL("case e.ev_extra1 {} end").format(sql.SQL(" ").join(keys))
        if keys
        else sql.SQL("null")
    )
    query = sql.SQL(
        """
        select distinct on (x.table_name, x.row_key)
               {consumer}, {batch_id}::bigint, {part}, x.ev_id, x.table_name, x.op, x.row_key,
               x.row_data
          from (
            select e.ev_id, e.ev_extra1 as table_name,
                   case when e.ev_type = 'R' then 'R'
                        when e.ev_type = 'SEQ' then 'S'
                        when e.ev_type like 'D:%' then 'D'
                        else {upsert} end as op,
                   case when e.ev_type = 'SEQ' then e.ev_extra1
                        when e.ev_type = 'R' then null
                        else {key} end as row_key,
                   case when e.ev_type = 'R' then null else e.ev_data end as row_data
              from ({batch}) e
              cross join lateral (
                  select case when e.ev_type like '_:%' then e.ev_data::json end as d
              ) j
             where {where}
          ) x
         where {in_part}
         order by x.table_name, x.row_key, x.ev_id desc
        """
    ).format(
        upsert=upsert,
        key=key,
        batch=sql.SQL(batch_sql.removesuffix(" order by ev_id")),  # we sort on our own
        consumer=sql.Literal(consumer),
        batch_id=sql.Literal(batch_id),
        part=sql.Literal(part),
        in_part=in_part,
        where=sql.SQL(" and ").join(sql.SQL("({})").format(w) for w in where),
    )
    return query.as_string(None)
