-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.batch_event_sql(bigint)
--
--     The ordered form: batch_event_sql(i_batch_id, true).
--
-- Parameters:
--     i_batch_id bigint
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.batch_event_sql(i_batch_id bigint) returns text
language sql stable as $$
    select ferry_queue.batch_event_sql(i_batch_id, true)
$$;

-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.batch_event_sql(bigint, boolean)
--
--     The SELECT that reads one batch's events, with every value inlined so that any
--     connection (a Spark executor, a second worker connection) can run it unchanged; with
--     i_ordered the events come in ev_id order.  Membership is by visibility: the events of
--     transactions visible in the closing tick's snapshot and not in the opening tick's.
--
-- Parameters:
--     i_batch_id bigint
--     i_ordered boolean
--
-- Returns:
--     text
--
-- Tables:
--     ferry_queue.event
--     ferry_queue.queue
--     ferry_queue.subscription
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.batch_event_sql(i_batch_id bigint, i_ordered boolean) returns text
language plpgsql stable as $$
declare
    s      ferry_queue.subscription;
    q      ferry_queue.queue;
    s1     pg_snapshot;
    s2     pg_snapshot;
    v_xips text;
    v_parts text;
begin
    s := ferry_queue.find_batch(i_batch_id);
    select * into q from ferry_queue.queue where queue_id = s.sub_queue;
    select tick_snapshot into s1 from ferry_queue.tick
     where tick_queue = s.sub_queue and tick_id = s.sub_last_tick;
    select tick_snapshot into s2 from ferry_queue.tick
     where tick_queue = s.sub_queue and tick_id = s.sub_next_tick;
    select string_agg((q.queue_id * 10 + n)::text, ',')
      into v_parts from generate_series(0, q.queue_ntables - 1) n;
    -- Transactions running at the previous tick and finished by this one (the rest of the
    -- batch is the txid range [xmax(prev), xmax(cur)) visible in cur).
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
        v_parts, s.sub_id,
        pg_snapshot_xmax(s1)::text, pg_snapshot_xmax(s2)::text, s2::text,
        case when v_xips is null then ''
             else format(' or ev_txid = any (%L::xid8[])', '{' || v_xips || '}') end,
        case when i_ordered then ' order by ev_id' else '' end);
end;
$$;
