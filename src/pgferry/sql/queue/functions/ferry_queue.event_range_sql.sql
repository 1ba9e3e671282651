-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.event_range_sql(boolean, text, text, text, text, text, text)
--
--     The one text of the SELECT that reads a subscription's events between two ticks,
--     each value of the range (tick_range_args) given as an SQL expression: literals
--     (tick_range_sql: a text any connection can run unchanged, a Spark task or a COPY) or
--     parameters ($1 .. $6: one text for every batch, which a session prepares once and
--     runs with a generic plan; the lookups are index probes on ev_txid).  With
--     i_ordered the events come in ev_id order.  e_running NULL: no transaction was
--     running at the opening tick (the clause is left out).
--
-- Parameters:
--     i_ordered      boolean
--     e_queue_id     text     integer: the queue, whose partitions are queue_id * 10 + 0..9
--     e_sub_id       text     integer: the consumer
--     e_prev_xmax    text     xid8
--     e_next_xmax    text     xid8
--     e_snapshot     text     pg_snapshot: the closing tick's
--     e_running      text     xid8[]
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.event_range_sql(
    i_ordered boolean, e_queue_id text, e_sub_id text, e_prev_xmax text, e_next_xmax text,
    e_snapshot text, e_running text) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
    -- PL/pgSQL, not SQL: a SQL function's body would be planned again at every call.
    return pg_catalog.format(
        'select ev_id, ev_time, ev_txid::text::bigint as ev_txid, ev_retry, ev_type, ev_data,'
        ' ev_extra1, ev_extra2, ev_extra3, ev_extra4'
        ' from ferry_queue.event'
        ' where ev_part between %1$s * 10 and %1$s * 10 + 9'
        ' and (ev_owner is null or ev_owner = %2$s)'
        ' and ((ev_txid >= %3$s and ev_txid < %4$s'
        ' and pg_visible_in_snapshot(ev_txid, %5$s))%6$s)%7$s',
        e_queue_id, e_sub_id, e_prev_xmax, e_next_xmax, e_snapshot,
        case when e_running is null then ''
             else pg_catalog.format(' or ev_txid = any (%s)', e_running) end,
        case when i_ordered then ' order by ev_id' else '' end);
end;
$$;
