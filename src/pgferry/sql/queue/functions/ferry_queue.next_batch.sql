-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.next_batch(text, text)
--
--     next_batch_custom without conditions: a batch up to the next tick.
--
-- Parameters:
--     i_queue text
--     i_consumer text
--
-- Returns:
--     bigint
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.next_batch(i_queue text, i_consumer text) returns bigint
language sql set search_path = pg_catalog, pg_temp as $$
    select ferry_queue.next_batch_custom(i_queue, i_consumer, null, null, null)
$$;
