-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.next_batch_upto(text, text, bigint, integer)
--
--     A batch that ends no later than tick i_upto: at the first tick that closes i_min_count
--     events, or at i_upto, whichever comes first.  A copied group's own consumer catches up
--     with this and meets the main stream exactly at its tick.  Returns the batch id (the open
--     one, if any), or NULL when no such tick exists yet.
--
-- Parameters:
--     i_queue text
--     i_consumer text
--     i_upto bigint
--     i_min_count integer
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.subscription (written, by open_next_batch)
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.next_batch_upto(
    i_queue text, i_consumer text, i_upto bigint, i_min_count integer)
returns bigint
language sql set search_path = pg_catalog, pg_temp as $$
    select ferry_queue.open_next_batch(i_queue, i_consumer, null, i_min_count, null, i_upto)
$$;
