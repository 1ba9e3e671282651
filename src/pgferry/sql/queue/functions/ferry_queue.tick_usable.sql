-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.tick_usable(text, bigint)
--
--     Whether tick i_tick is usable as a starting position: the queue holds it and every
--     event after it (its xmin is not below queue_rotated_xid).
--
-- Parameters:
--     i_queue text
--     i_tick bigint
--
-- Returns:
--     boolean
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.tick_usable(i_queue text, i_tick bigint) returns boolean
language sql stable set search_path = pg_catalog, pg_temp as $$
    select exists (
        select 1
          from ferry_queue.queue q
          join ferry_queue.tick t on t.tick_queue = q.queue_id
         where q.queue_name = i_queue and t.tick_id = i_tick
           and (q.queue_rotated_xid is null
                or pg_snapshot_xmin(t.tick_snapshot) >= q.queue_rotated_xid))
$$;
