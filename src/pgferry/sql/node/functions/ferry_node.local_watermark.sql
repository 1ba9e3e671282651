-- ---------------------------------------------------------------------------------------
-- Function: ferry_node.local_watermark(text)
--
--     The lowest tick this node's subtree still needs: on a leaf its own position; on a branch
--     the lowest of its subscribers' positions and reported watermarks (the
--     '.global_watermark' hold left out) and its own; on a root the same without its own.
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_node.local_state
--     ferry_node.node_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry_node.local_watermark(i_queue text) returns bigint
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    n     ferry_node.node_info;
    v_own bigint;
begin
    n := ferry_node.find_node(i_queue);
    select last_tick_id into v_own from ferry_node.local_state
     where queue_name = i_queue and consumer_name = n.worker_name;
    if n.node_type = 'leaf' then
        return v_own;
    end if;
    if n.node_type = 'root' then
        -- A root's recorded position is where it was created or promoted, not a need.
        v_own := null;
    end if;
    return least(ferry_queue.lowest_position(i_queue, array['.global_watermark']), v_own);
end;
$$;
