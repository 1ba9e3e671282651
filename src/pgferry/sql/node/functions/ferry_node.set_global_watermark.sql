-- ---------------------------------------------------------------------------------------
-- Function: ferry_node.set_global_watermark(text, bigint)
--
--     On a branch: keep what the cascade needs from tick i_tick on (hold '.global_watermark').
--     Elsewhere nothing (NULL).
--
-- Parameters:
--     i_queue text
--     i_tick bigint
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_node.node_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry_node.set_global_watermark(i_queue text, i_tick bigint) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    perform 1 from ferry_node.node_info where queue_name = i_queue and node_type = 'branch';
    if not found or i_tick is null then
        return null;
    end if;
    return ferry_queue.set_hold(i_queue, '.global_watermark', i_tick);
end;
$$;
