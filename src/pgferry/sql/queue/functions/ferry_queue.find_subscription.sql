-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.find_subscription(text, text)
--
--     The subscription row of consumer i_consumer on queue i_queue; raises SQLSTATE P0002
--     when the queue or the consumer is unknown.
--
-- Parameters:
--     i_queue text
--     i_consumer text
--
-- Returns:
--     ferry_queue.subscription
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.subscription
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.find_subscription(i_queue text, i_consumer text)
returns ferry_queue.subscription
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    s ferry_queue.subscription;
begin
    select s2.* into s
      from ferry_queue.subscription s2
      join ferry_queue.queue q on q.queue_id = s2.sub_queue
     where q.queue_name = i_queue and s2.sub_consumer = i_consumer;
    if not found then
        perform ferry_queue.find_queue(i_queue);
        raise exception 'Consumer % not registered on queue %', i_consumer, i_queue
            using errcode = 'P0002';
    end if;
    return s;
end;
$$;
