-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.batch_range_args(bigint)
--
--     The values that fix one open batch's events (tick_range_args of its two ticks): the
--     parameters of its event query in the form event_range_sql gives with $1 .. $6.
--
-- Parameters:
--     i_batch_id bigint
--
-- Returns:
--     one row of tick_range_args
--
-- Tables:
--     ferry_queue.subscription
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.batch_range_args(
    i_batch_id bigint,
    out queue_id integer, out sub_id integer, out prev_xmax xid8, out next_xmax xid8,
    out next_snapshot pg_snapshot, out running xid8[])
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    s ferry_queue.subscription;
begin
    s := ferry_queue.find_batch(i_batch_id);
    select * into queue_id, sub_id, prev_xmax, next_xmax, next_snapshot, running
      from ferry_queue.tick_range_args(s.sub_queue, s.sub_id, s.sub_last_tick, s.sub_next_tick);
end;
$$;
