-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.capture_function(integer, text[])
--
--     (Re)write the plain capture function of a queue for a key column list (one per queue
--     and key list, named capture_<queue_id>_<n>), for the queue's current rotation table:
--     templated_capture_function without a template.  Returns its name.
--
-- Parameters:
--     i_queue_id integer
--     i_pkey text[]
--
-- Returns:
--     text
--
-- Tables:
--     ferry_queue.capture_function (written, by templated_capture_function)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.capture_function(i_queue_id integer, i_pkey text[])
returns text
language sql set search_path = pg_catalog, pg_temp as $$
    select ferry_queue.templated_capture_function(i_queue_id, i_pkey, null)
$$;
