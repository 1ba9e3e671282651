-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.register_consumer_at(text, text, bigint)
--
--     Register consumer i_consumer at tick i_tick_id, or move an existing one there (its open
--     batch forgotten).  Returns 1 when registered, 0 when moved.
--
-- Parameters:
--     i_queue text
--     i_consumer text
--     i_tick_id bigint
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.subscription (written)
--     ferry_queue.queue
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.register_consumer_at(i_queue text, i_consumer text, i_tick_id bigint)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
begin
    q := ferry_queue.find_queue(i_queue);
    if i_consumer is null or i_consumer = '' then
        raise exception 'Consumer name must not be empty';
    end if;
    perform 1 from ferry_queue.tick where tick_queue = q.queue_id and tick_id = i_tick_id;
    if not found then
        raise exception 'Tick % not found on queue %', i_tick_id, i_queue;
    end if;
    update ferry_queue.subscription
       set sub_last_tick = i_tick_id, sub_batch = null, sub_next_tick = null,
           sub_active = now()
     where sub_queue = q.queue_id and sub_consumer = i_consumer;
    if found then
        return 0;
    end if;
    insert into ferry_queue.subscription (sub_queue, sub_consumer, sub_last_tick)
    values (q.queue_id, i_consumer, i_tick_id);
    return 1;
end;
$$;
