-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.tick_range_args(integer, integer, bigint, bigint)
--
--     The values that fix which events of a subscription lie between two ticks of its queue
--     (i_prev_tick, i_next_tick]: the parameters of the event query (event_range_sql).
--     Membership is by visibility: the events of transactions visible in the closing
--     tick's snapshot and not in the opening tick's, i.e. the txid range
--     [xmax(prev), xmax(next)) visible in next, and the transactions running at the
--     opening tick that the closing tick sees committed.
--
-- Parameters:
--     i_queue_id   integer
--     i_sub_id     integer
--     i_prev_tick  bigint
--     i_next_tick  bigint
--
-- Returns:
--     one row (every column NULL when either tick is gone) of:
--         queue_id      integer      the queue (its event partitions)
--         sub_id        integer      the consumer (retried events are its own)
--         prev_xmax     xid8         xmax of the opening tick's snapshot
--         next_xmax     xid8         xmax of the closing tick's snapshot
--         next_snapshot pg_snapshot  the closing tick's snapshot
--         running       xid8[]       running at the opening tick, committed by the closing
--
-- Tables:
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.tick_range_args(
    i_queue_id integer, i_sub_id integer, i_prev_tick bigint, i_next_tick bigint,
    out queue_id integer, out sub_id integer, out prev_xmax xid8, out next_xmax xid8,
    out next_snapshot pg_snapshot, out running xid8[])
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    s1 pg_snapshot;
    s2 pg_snapshot;
begin
    select tick_snapshot into s1 from ferry_queue.tick
     where tick_queue = i_queue_id and tick_id = i_prev_tick;
    select tick_snapshot into s2 from ferry_queue.tick
     where tick_queue = i_queue_id and tick_id = i_next_tick;
    if s1 is null or s2 is null then
        return;
    end if;
    queue_id := i_queue_id;
    sub_id := i_sub_id;
    prev_xmax := pg_catalog.pg_snapshot_xmax(s1);
    next_xmax := pg_catalog.pg_snapshot_xmax(s2);
    next_snapshot := s2;
    select coalesce(pg_catalog.array_agg(x order by x), '{}') into running
      from pg_catalog.pg_snapshot_xip(s1) x
     where pg_catalog.pg_visible_in_snapshot(x, s2);
end;
$$;
