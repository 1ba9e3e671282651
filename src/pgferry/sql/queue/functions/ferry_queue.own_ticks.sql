-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.own_ticks(ferry_queue.queue)
--
--     Queue row q, refused (Queue % has an external ticker) when the queue is ticked from
--     outside: a branch mirrors its provider's ticks and makes none of its own (make_tick,
--     ticker_step).
--
-- Parameters:
--     q ferry_queue.queue
--
-- Returns:
--     ferry_queue.queue      q
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.own_ticks(q ferry_queue.queue) returns ferry_queue.queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    if q.queue_external_ticker then
        raise exception 'Queue % has an external ticker', q.queue_name;
    end if;
    return q;
end;
$$;
