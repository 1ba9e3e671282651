-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.drop_hold(text, text)
--
--     Remove hold i_name; false when there was none.
--
-- Parameters:
--     i_queue text
--     i_name text
--
-- Returns:
--     boolean
--
-- Tables:
--     ferry_queue.subscription (written)
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.drop_hold(i_queue text, i_name text) returns boolean
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
begin
    q := ferry_queue.find_queue(i_queue);
    delete from ferry_queue.subscription
     where sub_queue = q.queue_id and sub_consumer = i_name and sub_batch is null;
    return found;
end;
$$;
