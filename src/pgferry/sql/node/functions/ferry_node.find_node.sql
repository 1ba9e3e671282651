-- ---------------------------------------------------------------------------------------
-- Function: ferry_node.find_node(text)
--
--     This database's node of queue i_queue; raises SQLSTATE P0002 (Node not initialized)
--     when there is none.
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     ferry_node.node_info
--
-- Tables:
--     ferry_node.node_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry_node.find_node(i_queue text) returns ferry_node.node_info
language sql stable set search_path = pg_catalog, pg_temp as $$
    select ferry_queue.require_row((select n from ferry_node.node_info n where n.queue_name = i_queue),
                             format('Node not initialized for queue %s', i_queue))
$$;
