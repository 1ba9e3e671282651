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
language sql stable set search_path = pg_catalog, pg_temp as $$
    select ferry_queue.batch_event_sql(i_batch_id, true)
$$;

-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.batch_event_sql(bigint, boolean)
--
--     The SELECT that reads one open batch's events: tick_range_sql of the batch's two
--     ticks (every value inlined; with i_ordered in ev_id order).
--
-- Parameters:
--     i_batch_id bigint
--     i_ordered boolean
--
-- Returns:
--     text
--
-- Tables:
--     ferry_queue.subscription
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.batch_event_sql(i_batch_id bigint, i_ordered boolean) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    s ferry_queue.subscription;
begin
    s := ferry_queue.find_batch(i_batch_id);
    return ferry_queue.tick_range_sql(
        s.sub_queue, s.sub_id, s.sub_last_tick, s.sub_next_tick, i_ordered);
end;
$$;
