-- ---------------------------------------------------------------------------------------
-- Function: ferry_node.global_watermark(text)
--
--     What this node keeps for the whole cascade.  On a root, the lowest position of all; a
--     '.global_watermark' hold left from the node's days as a branch is dropped there, as on a
--     root it would keep everything for ever.  On a branch, its hold (its local watermark
--     until it has one).  A leaf keeps nothing.
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_node.node_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry_node.global_watermark(i_queue text) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_type text;
    v_tick bigint;
begin
    v_type := (ferry_node.find_node(i_queue)).node_type;
    if v_type = 'leaf' then
        return null;
    end if;
    if v_type = 'root' then
        perform ferry_queue.drop_hold(i_queue, '.global_watermark');
        return ferry_node.local_watermark(i_queue);
    end if;
    select c.last_tick into v_tick
      from ferry_queue.get_consumer_info(i_queue) c
     where c.consumer_name = '.global_watermark';
    return coalesce(v_tick, ferry_node.local_watermark(i_queue));
end;
$$;
