-- ---------------------------------------------------------------------------------------
-- Function: ferry_node.drop_watermark(text, text)
--
--     Forget the holds kept for node i_node (its watermark, and a gravestone left for it).
--     Returns how many were dropped.
--
-- Parameters:
--     i_queue text
--     i_node text
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_node.drop_watermark(i_queue text, i_node text) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_count integer := 0;
begin
    perform 1 from ferry_queue.queue where queue_name = i_queue;
    if not found then
        return 0;
    end if;
    if ferry_queue.drop_hold(i_queue, ferry_node.watermark_hold(i_node)) then
        v_count := v_count + 1;
    end if;
    if ferry_queue.drop_hold(i_queue, '.' || i_node || '.gravestone') then
        v_count := v_count + 1;
    end if;
    return v_count;
end;
$$;
