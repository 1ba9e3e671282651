-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.unregister_consumer(text, text)
--
--     Unregister consumer i_consumer with its retry events.  Returns 1.
--
-- Parameters:
--     i_queue text
--     i_consumer text
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.retry_queue (written)
--     ferry_queue.subscription (written)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.unregister_consumer(i_queue text, i_consumer text) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    s ferry_queue.subscription;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
    delete from ferry_queue.retry_queue where ev_owner = s.sub_id;
    delete from ferry_queue.subscription where sub_id = s.sub_id;
    return 1;
end;
$$;
