-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.version()
--
--     The version of the queue's SQL API, '1.0' (kept as first released).
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.version() returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$ select '1.0' $$;
