-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.force_tick(text)
--
--     Make the next ticker() call tick, and wake a listening ticker daemon (channel
--     ferry_queue_ticker).  Returns the current last tick id (poll until it moves).
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.queue (written)
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.force_tick(i_queue text) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
begin
    q := ferry_queue.find_queue(i_queue);
    update ferry_queue.queue set queue_force_tick = true where queue_id = q.queue_id;
    perform pg_notify('ferry_queue_ticker', i_queue);
    return (select max(tick_id) from ferry_queue.tick where tick_queue = q.queue_id);
end;
$$;
