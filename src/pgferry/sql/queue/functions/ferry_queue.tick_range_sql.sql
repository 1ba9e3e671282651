-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.tick_range_sql(integer, integer, bigint, bigint, boolean)
--
--     The SELECT that reads a subscription's events between two ticks of its queue
--     (i_prev_tick, i_next_tick], with every value inlined so that any connection (a
--     Spark executor, a second worker connection, a COPY) can run it unchanged; with
--     i_ordered the events come in ev_id order.  Membership is by visibility
--     (tick_range_args); the text is inline_event_sql's of the range.
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
-- Calls:
--     ferry_queue.tick_range_args
--     ferry_queue.inline_event_sql
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.tick_range_sql(
    i_queue_id integer, i_sub_id integer, i_prev_tick bigint, i_next_tick bigint,
    i_ordered boolean) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    a record;
begin
    select * into a
      from ferry_queue.tick_range_args(i_queue_id, i_sub_id, i_prev_tick, i_next_tick);
    return ferry_queue.inline_event_sql(i_ordered, a.queue_id, a.sub_id, a.prev_xmax,
                                        a.next_xmax, a.next_snapshot, a.running);
end;
$$;
