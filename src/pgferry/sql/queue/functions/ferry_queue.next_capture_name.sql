-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.next_capture_name(integer)
--
--     A new function name of the queue: capture_<queue_id>_<n>, n one above the highest so far
--     (pruned names are not reused while a higher one exists).
--
-- Parameters:
--     i_queue_id integer
--
-- Returns:
--     text
--
-- Tables:
--     ferry_queue.capture_function
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.next_capture_name(i_queue_id integer) returns text
language sql set search_path = pg_catalog, pg_temp as $$
    select format('capture_%s_%s', i_queue_id,
                  coalesce(max((regexp_match(cf_name, '_([0-9]+)$'))[1]::integer), 0) + 1)
      from ferry_queue.capture_function where cf_queue = i_queue_id
$$;
