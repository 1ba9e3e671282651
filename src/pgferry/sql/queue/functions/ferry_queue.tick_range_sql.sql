-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.tick_range_sql(integer, integer, bigint, bigint, boolean)
--
--     The SELECT that reads a subscription's events between two ticks of its queue
--     (i_prev_tick, i_next_tick], with every value inlined so that any connection (a
--     Spark executor, a second worker connection) can run it unchanged; with i_ordered
--     the events come in ev_id order.  Membership is by visibility: the events of
--     transactions visible in the closing tick's snapshot and not in the opening tick's.
--     An open batch's text (batch_event_sql) is this one of its two ticks, so a batch
--     read before it is opened (the worker's read-ahead) has the same text as when open.
--
-- Parameters:
--     i_queue_id   integer
--     i_sub_id     integer
--     i_prev_tick  bigint
--     i_next_tick  bigint
--     i_ordered    boolean
--
-- Returns:
--     text (null when either tick is gone)
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.tick_range_sql(
    i_queue_id integer, i_sub_id integer, i_prev_tick bigint, i_next_tick bigint,
    i_ordered boolean) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    s1     pg_snapshot;
    s2     pg_snapshot;
    v_xips text;
    v_parts text;
begin
    select tick_snapshot into s1 from ferry_queue.tick
     where tick_queue = i_queue_id and tick_id = i_prev_tick;
    select tick_snapshot into s2 from ferry_queue.tick
     where tick_queue = i_queue_id and tick_id = i_next_tick;
    if s1 is null or s2 is null then
        return null;
    end if;
    select string_agg((q.queue_id * 10 + n)::text, ',')
      into v_parts
      from ferry_queue.queue q, generate_series(0, q.queue_ntables - 1) n
     where q.queue_id = i_queue_id;
    -- Transactions running at the previous tick and finished by this one (the rest of the
    -- range is the txid range [xmax(prev), xmax(next)) visible in next).
    select string_agg(x::text, ',' order by x) into v_xips
      from pg_snapshot_xip(s1) x
     where pg_visible_in_snapshot(x, s2);
    return format(
        'select ev_id, ev_time, ev_txid::text::bigint as ev_txid, ev_retry, ev_type, ev_data,'
        ' ev_extra1, ev_extra2, ev_extra3, ev_extra4'
        ' from ferry_queue.event'
        ' where ev_part in (%s)'
        ' and (ev_owner is null or ev_owner = %s)'
        ' and ((ev_txid >= %L::xid8 and ev_txid < %L::xid8'
        ' and pg_visible_in_snapshot(ev_txid, %L::pg_snapshot))%s)%s',
        v_parts, i_sub_id,
        pg_snapshot_xmax(s1)::text, pg_snapshot_xmax(s2)::text, s2::text,
        case when v_xips is null then ''
             else format(' or ev_txid = any (%L::xid8[])', '{' || v_xips || '}') end,
        case when i_ordered then ' order by ev_id' else '' end);
end;
$$;
