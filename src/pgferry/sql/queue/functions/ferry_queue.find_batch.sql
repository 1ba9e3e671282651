-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.find_batch(bigint)
--
--     The subscription row whose open batch is i_batch_id; raises SQLSTATE P0002 (Batch not
--     found) when no consumer has it open.
--
-- Parameters:
--     i_batch_id bigint
--
-- Returns:
--     ferry_queue.subscription
--
-- Tables:
--     ferry_queue.subscription
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.find_batch(i_batch_id bigint)
returns ferry_queue.subscription
language sql stable set search_path = pg_catalog, pg_temp as $$
    select ferry_queue.require_row((select s from ferry_queue.subscription s where s.sub_batch = i_batch_id),
                             format('Batch not found: %s', i_batch_id))
$$;
