-- ---------------------------------------------------------------------------------------
-- Function: ferry_node.watermark_hold(text)
--
--     The name of the hold a provider keeps for subscriber i_node's watermark.
--
-- Parameters:
--     i_node text
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_node.watermark_hold(i_node text) returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$ select '.' || i_node || '.watermark' $$;
