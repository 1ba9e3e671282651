-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.usable_ticks(text)
--
--     The oldest usable tick and the newest tick of a queue (NULLs when it has none).
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     one row of:
--         oldest bigint
--         newest bigint
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.usable_ticks(i_queue text, out oldest bigint, out newest bigint)
language sql stable set search_path = pg_catalog, pg_temp as $$
    select min(t.tick_id) filter (where q.queue_rotated_xid is null
                                     or pg_snapshot_xmin(t.tick_snapshot) >= q.queue_rotated_xid),
           max(t.tick_id)
      from ferry_queue.queue q
      join ferry_queue.tick t on t.tick_queue = q.queue_id
     where q.queue_name = i_queue
$$;
