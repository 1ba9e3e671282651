-- ---------------------------------------------------------------------------------------
-- Function: ferry_node.set_subscriber_watermark(text, text, bigint)
--
--     On a provider: hold what subscriber i_node reported (see ferry_queue.set_hold for where
--     the hold lands).  Returns the hold's tick; NULL, and nothing held, when i_node is not a
--     subscriber here (any more: a late report after it moved away must not leave a hold
--     that nobody releases).  The subscriber row is locked, so unregistering it waits for
--     this transaction and then drops the hold too.
--
-- Parameters:
--     i_queue text
--     i_node text
--     i_tick bigint
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_node.node_info
--     ferry_node.subscriber_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry_node.set_subscriber_watermark(i_queue text, i_node text, i_tick bigint)
returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_type text;
begin
    select node_type into v_type from ferry_node.node_info where queue_name = i_queue;
    if not found or v_type = 'leaf' then
        raise exception 'Node has no queue % to hold a watermark in', i_queue;
    end if;
    perform 1 from ferry_node.subscriber_info
     where queue_name = i_queue and subscriber_node = i_node
       for share;
    if not found then
        return null;
    end if;
    return ferry_queue.set_hold(i_queue, ferry_node.watermark_hold(i_node), i_tick);
end;
$$;
