-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.register_consumer(text, text)
--
--     Register consumer i_consumer at the queue's latest tick.  Returns 1, or 0 when it is
--     registered already (its position unchanged).
--
-- Parameters:
--     i_queue text
--     i_consumer text
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.subscription
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.register_consumer(i_queue text, i_consumer text) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
    v_tick bigint;
begin
    q := ferry_queue.find_queue(i_queue);
    perform 1 from ferry_queue.subscription
     where sub_queue = q.queue_id and sub_consumer = i_consumer;
    if found then
        return 0;
    end if;
    select max(tick_id) into v_tick from ferry_queue.tick where tick_queue = q.queue_id;
    if v_tick is null then
        raise exception 'No ticks for this queue: %', i_queue;
    end if;
    return ferry_queue.register_consumer_at(i_queue, i_consumer, v_tick);
end;
$$;
