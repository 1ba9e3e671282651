-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.batch_range_args(bigint)
--
--     The values that fix one open batch's events (tick_range_args of its two ticks): the
--     parameters of its event query in the form event_range_sql gives with $1 .. $6; and,
--     from the same look-ups, its unordered event query with them inlined (event_sql,
--     batch_event_sql's text).
--
-- Parameters:
--     i_batch_id bigint
--
-- Returns:
--     one row of tick_range_args' columns, then event_sql text
--
-- Calls:
--     ferry_queue.find_batch
--     ferry_queue.tick_range_args
--     ferry_queue.inline_event_sql
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.batch_range_args(
    i_batch_id bigint,
    out queue_id integer, out sub_id integer, out prev_xmax xid8, out next_xmax xid8,
    out next_snapshot pg_snapshot, out running xid8[], out event_sql text)
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    s ferry_queue.subscription;
begin
    s := ferry_queue.find_batch(i_batch_id);
    select * into queue_id, sub_id, prev_xmax, next_xmax, next_snapshot, running
      from ferry_queue.tick_range_args(s.sub_queue, s.sub_id, s.sub_last_tick, s.sub_next_tick);
    event_sql := ferry_queue.inline_event_sql(false, queue_id, sub_id, prev_xmax, next_xmax,
                                              next_snapshot, running);
end;
$$;
